"""The service processes of a whole system: their flags, ports, certificates and log files.

Nothing starts here: these functions turn a :class:`~.spec.SystemSpec` and the ports chosen up
front (:class:`ServicePlan`) into :class:`~.processes.ServiceProcess` objects that
:mod:`.lifecycle` starts.  Every service serves plain-http metrics
with ``/readyz`` on a port of its own (what the process is polled on) and logs to
``<work dir>/logs/<name>.log``; the webhook and the extender serve TLS with certificates minted
here by one CA, whose bundle goes into the MutatingWebhookConfiguration.

With :attr:`~.spec.SystemSpec.vgpu_monitor` each node's device plugin runs with ``--host-root``
at the node's host root and a vGPU monitor (``vgpu-monitor-<node>``, the fake backend with the
node's GPUs) reads ``HOOK_PATH=<host root>/usr/local/vgpu``.

A DRA node's plugin runs ``--mode dra`` with the directories of :func:`dra_dirs`, which its
kubelet stand-in is given too (the cluster config's ``pluginsRegistryDir`` and ``cdiDirs``), so
the kubelet finds the plugin's registration socket and the runtime its CDI spec files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hami_kubelet_api.constants import PLUGINS_REGISTRY_DIR_NAME
from hami_kubesim.certs import ca_bundle_b64, generate_ca
from hami_kubesim.kubelet.settings import beside, pod_resources_socket_for
from hami_kubesim.stack.system.objects import MONITOR_SERVICE, WEBHOOK_SERVICE
from hami_kubesim.stack.system.ports import free_port
from hami_kubesim.stack.system.processes import ServiceProcess, ServiceSpec
from hami_kubesim.stack.system.spec import GpuNode, SystemSpec

__all__ = [
    "HOOK_PATH",
    "LEASE",
    "SCHEDULER_NAME",
    "DraDirs",
    "ServicePlan",
    "deviceplugin_args",
    "dra_dirs",
    "issue_certificates",
    "monitor_processes",
    "node_config_file",
    "plugin_processes",
    "scheduler_processes",
    "webhook_process",
]

LEASE = ("kube-system", "hami-scheduler")
"""``(namespace, name)`` of the Lease the extender replicas campaign on."""
SCHEDULER_NAME = "hami-scheduler"
HOOK_PATH = "usr/local/vgpu"
"""The chart's ``HOOK_PATH``, under a node's host root (the plugin's default hook path)."""


@dataclass(frozen=True, slots=True)
class ServicePlan:
    """Ports and files chosen before anything starts."""

    work_dir: Path
    webhook_port: int
    scheduler_ports: tuple[int, ...]
    front_port: int
    """Where the scheduling loop calls the extender: the only replica, or the leader router."""
    gpumap_ports: tuple[int, ...] = ()
    """Each replica's GPU map port (``SystemSpec.gpumap``), in replica order; empty when off."""

    @property
    def extender_url(self) -> str:
        return f"https://127.0.0.1:{self.front_port}"

    def log_file(self, name: str) -> Path:
        return self.work_dir / "logs" / f"{name}.log"

    def devices_file(self, node: str) -> Path:
        return self.work_dir / "devices" / f"{node}.yaml"


@dataclass(frozen=True, slots=True)
class DraDirs:
    """Where a DRA node's plugin and kubelet meet, beside the node's device-plugin dir."""

    kubelet_dir: Path
    """The plugin's ``--kubelet-dir`` (plays ``/var/lib/kubelet``): ``plugins_registry/`` with
    the registration socket and ``plugins/gpu.hami.io/`` with ``dra.sock`` and the checkpoint."""
    cdi_dir: Path
    """The plugin's ``--cdi-dir`` and the kubelet stand-in's only CDI spec dir (plays
    ``/var/run/cdi``)."""

    @property
    def registry_dir(self) -> Path:
        """The kubelet stand-in's ``plugins_registry_dir``."""
        return self.kubelet_dir / PLUGINS_REGISTRY_DIR_NAME


def dra_dirs(plugin_dir: Path) -> DraDirs:
    """``<plugin dir>-kubelet`` and ``<plugin dir>-cdi`` (the kubelet stand-in's default CDI
    dir); kept short: the sockets' paths are limited to 107 bytes."""
    return DraDirs(kubelet_dir=beside(plugin_dir, "kubelet"), cdi_dir=beside(plugin_dir, "cdi"))


def node_config_file(devices: Path) -> Path:
    """Where a node's plugin ``config.json`` lives: beside its fake-devices file."""
    return devices.with_name(devices.stem + ".config.json")


def issue_certificates(work_dir: Path) -> tuple[str, Path, Path]:
    """Certificates for the webhook and the extender; returns the CA bundle and both dirs."""
    ca = generate_ca("hami-e2e-ca")
    namespace, name = WEBHOOK_SERVICE
    webhook = ca.issue(
        [f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local", "127.0.0.1"]
    )
    scheduler = ca.issue(
        ["hami-scheduler.kube-system.svc", "localhost", "127.0.0.1"], common_name="hami-scheduler"
    )
    webhook_dir, scheduler_dir = work_dir / "tls" / "webhook", work_dir / "tls" / "scheduler"
    webhook.write(webhook_dir)
    scheduler.write(scheduler_dir)
    return ca_bundle_b64(ca.cert_pem), webhook_dir, scheduler_dir


def _process(
    spec: SystemSpec, plan: ServicePlan, *, name: str, module: str, args: list[str], metrics: int
) -> ServiceProcess:
    """``python -m module args`` with plain-http metrics (and ``/readyz``) on ``metrics``."""
    return ServiceProcess(
        ServiceSpec(
            name=name,
            module=module,
            args=tuple(args),
            ready_url=f"http://127.0.0.1:{metrics}/readyz",
            metrics_url=f"http://127.0.0.1:{metrics}/metrics",
            log_file=plan.log_file(name),
            ready_timeout=spec.start_timeout,
        )
    )


def _common(spec: SystemSpec, api_url: str, metrics_port: int) -> list[str]:
    return [
        f"--kube-url={api_url}",
        f"--metrics-bind-address=127.0.0.1:{metrics_port}",
        f"--log-format={spec.log_format}",
        f"--log-level={spec.log_level}",
    ]


def _https(port: int, tls_dir: Path, spec: SystemSpec) -> list[str]:
    """The flags the webhook and the extender share: where and how they serve, which
    scheduler name they stand for and the device configuration (Ascend enabled, as the chart's
    ``global.devices.ascend.enabled`` does: the test bed runs Ascend nodes)."""
    return [
        f"--http_bind=127.0.0.1:{port}",
        f"--cert_file={tls_dir / 'tls.crt'}",
        f"--key_file={tls_dir / 'tls.key'}",
        f"--scheduler-name={SCHEDULER_NAME}",
        f"--device-config-file={spec.device_config}",
        "--enable-ascend=true",
    ]


def webhook_process(
    spec: SystemSpec, plan: ServicePlan, api_url: str, tls_dir: Path
) -> ServiceProcess:
    metrics = free_port()
    args = [
        *_https(plan.webhook_port, tls_dir, spec),
        *_common(spec, api_url, metrics),
        *(["--write-capacity-totals=true"] if spec.capacity_totals else []),
        *(["--dra-claims=true"] if spec.dra_claims else []),
        *spec.webhook_args,
    ]
    return _process(spec, plan, name="webhook", module="hami_webhook", args=args, metrics=metrics)


def scheduler_processes(
    spec: SystemSpec, plan: ServicePlan, api_url: str, tls_dir: Path
) -> tuple[ServiceProcess, ...]:
    """One extender per replica; with two or more, each campaigns for :data:`LEASE`."""
    options = spec.scheduler
    replicated = options.replicas > 1
    processes = []
    for index, port in enumerate(plan.scheduler_ports):
        name = f"scheduler-{index}"
        metrics = free_port()
        args = [*_https(port, tls_dir, spec), *_common(spec, api_url, metrics)]
        flags = {
            "--handshake-timeout": options.handshake_timeout,
            "--handshake-interval": options.handshake_interval,
            "--node-lock-timeout": options.node_lock_timeout,
            "--node-scheduler-policy": options.node_scheduler_policy,
            "--gpu-scheduler-policy": options.gpu_scheduler_policy,
        }
        args += [f"{flag}={value}" for flag, value in flags.items() if value]
        # Each replica its own port: the flag's default, :9397 on every interface, would clash
        # between replicas and with other stacks on the machine; empty turns the map off.
        gpumap = f"127.0.0.1:{plan.gpumap_ports[index]}" if plan.gpumap_ports else ""
        args.append(f"--gpumap-bind-address={gpumap}")
        # Tests look at the map right after a change: no answer shared between requests.
        args.append("--gpumap-max-age=0s")
        # The map reads usage from the monitors the stack runs, found as the chart's are (the
        # monitor Service's EndpointSlices, published by the lifecycle); without monitors, off
        # (the flag's default, each node's InternalIP, leads nowhere here).
        monitors = "/".join(MONITOR_SERVICE) if spec.vgpu_monitor and gpumap else ""
        args.append(f"--gpumap-monitors={monitors}")
        if replicated:
            namespace, lease = LEASE
            args += [
                "--leader-elect=true",
                "--leader-elect-mode=campaign",
                f"--leader-elect-identity={name}",
                f"--leader-elect-resource-name={lease}",
                f"--leader-elect-resource-namespace={namespace}",
                f"--leader-elect-lease-duration={options.lease_duration}",
                f"--leader-elect-renew-deadline={options.renew_deadline}",
                f"--leader-elect-retry-period={options.retry_period}",
            ]
        args += options.extra_args
        processes.append(
            _process(spec, plan, name=name, module="hami_scheduler", args=args, metrics=metrics)
        )
    return tuple(processes)


def deviceplugin_args(
    spec: SystemSpec,
    node: GpuNode,
    *,
    api_url: str,
    kubelet_socket: Path,
    devices: Path,
    host_root: Path | None = None,
) -> list[str]:
    """The flags of ``node``'s device plugin (also used to run plugins in-process); its
    pod-resources socket is where the node's kubelet stand-in serves it, beside the plugin dir
    of ``kubelet_socket`` (``none`` for a node whose plugin runs without it); ``host_root`` is
    its ``--host-root`` (None: ``none``, no files)."""
    pod_resources = (
        pod_resources_socket_for(kubelet_socket.parent) if node.pod_resources else "none"
    )
    return [
        f"--node-name={node.name}",
        f"--kubelet-socket={kubelet_socket}",
        f"--pod-resources-socket={pod_resources}",
        "--device-backend=fake",
        f"--fake-devices={devices}",
        f"--config-file={spec.device_config}",
        f"--host-root={host_root or 'none'}",
        "--kubelet-poll-interval=0.2",
        "--fake-poll-interval=0.2",
        "--register-retry-interval=1",
        f"--kube-url={api_url}",
        f"--log-format={spec.log_format}",
        f"--log-level={spec.log_level}",
        *(["--enable-topology-score=true"] if node.topology_score else []),
        *_mode_args(node, devices, host_root),
        *_dra_args(node, kubelet_socket.parent),
        *(["--advertise-capacity-totals=true"] if spec.capacity_totals else []),
        *spec.deviceplugin_args,
    ]


def _mode_args(node: GpuNode, devices: Path, host_root: Path | None) -> list[str]:
    """A MIG node's plugin reads its ``config.json`` and keeps its own lock file (the machine's
    ``/tmp`` is every simulated node's)."""
    if node.operating_mode == "hami-core":
        return []
    lock = (
        host_root / "tmp/hami/hami-mig-apply.lock"
        if host_root is not None
        else devices.with_name(devices.stem + ".mig-apply.lock")
    )
    return [
        f"--node-config-file={node_config_file(devices)}",
        f"--mig-lock-file={lock}",
        "--mig-reconcile-interval=0.5",
        # Creating instances is part of Allocate on MIG nodes: a loaded test machine needs time.
        "--allocate-timeout=10",
    ]


def _dra_args(node: GpuNode, plugin_dir: Path) -> list[str]:
    """A DRA node's plugin: the kubelet plugin mode in the node's :func:`dra_dirs`, checking
    its ResourceSlice every second (a fault's lost slice comes back soon)."""
    if not node.dra:
        return []
    dirs = dra_dirs(plugin_dir)
    return [
        "--mode=dra",
        f"--kubelet-dir={dirs.kubelet_dir}",
        f"--cdi-dir={dirs.cdi_dir}",
        "--slice-resync-interval=1",
    ]


def plugin_processes(
    spec: SystemSpec,
    plan: ServicePlan,
    api_url: str,
    kubelet_sockets: Mapping[str, Path],
    host_roots: Mapping[str, Path] | None = None,
) -> dict[str, ServiceProcess]:
    """One device plugin per node that runs one, by node name (``--host-root`` from
    ``host_roots``, ``none`` for a node not in it)."""
    plugins: dict[str, ServiceProcess] = {}
    for node in spec.nodes:
        if not node.device_plugin:
            continue
        metrics = free_port()
        args = deviceplugin_args(
            spec,
            node,
            api_url=api_url,
            kubelet_socket=kubelet_sockets[node.name],
            devices=plan.devices_file(node.name),
            host_root=(host_roots or {}).get(node.name),
        )
        args.append(f"--metrics-bind-address=127.0.0.1:{metrics}")
        name = f"deviceplugin-{node.name}"
        plugins[node.name] = _process(
            spec, plan, name=name, module="hami_deviceplugin", args=args, metrics=metrics
        )
    return plugins


def monitor_processes(
    spec: SystemSpec, plan: ServicePlan, api_url: str, host_roots: Mapping[str, Path]
) -> dict[str, ServiceProcess]:
    """One vGPU monitor per node of ``host_roots`` that runs a device plugin, by node name."""
    monitors: dict[str, ServiceProcess] = {}
    for node in spec.nodes:
        root = host_roots.get(node.name)
        if not node.device_plugin or root is None:
            continue
        metrics = free_port()
        args = [
            f"--node-name={node.name}",
            f"--hook-path={root / HOOK_PATH}",
            "--device-backend=fake",
            f"--fake-devices={plan.devices_file(node.name)}",
            f"--feedback-interval={spec.monitor_feedback_interval}",
            # The node's own, not this machine's /tmp (shared by every node of the stack).
            f"--mig-lock-file={root / 'tmp/hami/hami-mig-apply.lock'}",
            *_common(spec, api_url, metrics),
        ]
        name = f"vgpu-monitor-{node.name}"
        monitors[node.name] = _process(
            spec, plan, name=name, module="hami_deviceplugin.monitor", args=args, metrics=metrics
        )
    return monitors
