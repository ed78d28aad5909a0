"""The device plugin's command-line flags: one table, each flag with its environment variable.

HAMi's flag names where HAMi has them: ``--node-name`` (env ``NODE_NAME``), ``--config-file``
(``device-config.yaml``), ``--device-split-count``, ``--device-memory-scaling``,
``--device-cores-scaling``, ``--disable-core-limit``, ``--resource-name``, ``--kubelet-socket``,
``--mig-strategy``, ``--device-list-strategy``, ``--fail-on-init-error``; the env names are the
flag names upper-cased (``DEVICE_SPLIT_COUNT``, ...), ``HOOK_PATH`` for ``--hook-path``.  Ours
take ``HAMI_`` + the upper-cased name (``--fake-devices`` → ``HAMI_FAKE_DEVICES``).  A flag on the
command line wins over its environment variable.

``--pod-resources-socket`` (``HAMI_POD_RESOURCES_SOCKET``, default
``/var/lib/kubelet/pod-resources/kubelet.sock``; ``none`` turns it off) is where the kubelet's
pod-resources API is asked which pod an Allocate is for.

``--enable-topology-score`` (HAMi's env ``ENABLE_TOPOLOGY_SCORE``, default false; HAMi's chart
sets it when the scheduler's default GPU policy is ``topology-aware``) computes every GPU pair's
link score and writes ``hami.io/node-nvidia-score``.

``--advertise-capacity-totals`` (``HAMI_ADVERTISE_CAPACITY_TOTALS``, default false) keeps
``hami.io/nvidia-memory`` and ``hami.io/nvidia-cores`` in the node's ``status.capacity`` (the
capacity totals mode, docs/capacity.md); with it off they are removed where present.

RDMA (a second plugin in the same process, see the README): ``--enable-rdma`` (``auto``, the
default, serves it when NICs are found at start; ``true``; ``false``), ``--rdma-resource-name``
(default ``koordinator.sh/rdma``), ``--rdma-socket-name`` (default from the resource name,
``koordinator-rdma.sock``), ``--rdma-discovery`` (``sysfs``, or ``fake``: the ``nics`` of
``--fake-devices``; default ``fake`` with the fake backend, else ``sysfs``),
``--rdma-poll-interval`` (seconds between rescans, default 10).

Dynamic MIG (``operatingmode: mig``): ``--mig-lock-file`` (``HAMI_MIG_LOCK_FILE``, default
HAMi's ``/tmp/hami/hami-mig-apply.lock``) exists while the MIG layout changes;
``--mig-reconcile-interval`` (seconds, default 5) between looks for instances no live pod
references.  Creating instances takes real GPUs a second or more: give ``--allocate-timeout``
room on MIG nodes.

DRA (docs/dra.md): ``--mode`` (``HAMI_MODE``): ``device-plugin`` (the default) or ``dra``; a node
runs one of them for its GPUs, never both.  ``--kubelet-dir`` (default ``/var/lib/kubelet``: the
registration socket goes to ``plugins_registry/gpu.hami.io-reg.sock``, the service socket to
``plugins/gpu.hami.io/dra.sock``), ``--cdi-dir`` (default ``/var/run/cdi``), ``--dra-state-dir``
(the checkpoint's directory, default ``<kubelet dir>/plugins/gpu.hami.io``),
``--slice-resync-interval`` (seconds between ResourceSlice checks, default 10).

The parser's defaults are ``None`` so that :mod:`hami_deviceplugin.settings` can tell explicit
flags (which override the config file, see :data:`FLAG_TO_CONFIG`) from built-in defaults.
A value of the wrong type or outside the allowed set is refused by the parser (exit status 2).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Final

from hami_kubelet_api.constants import KUBELET_DIR, KUBELET_SOCKET, POD_RESOURCES_SOCKET
from hami_protocol.topology.layout import RDMA_RESOURCE
from hami_runtime import flags
from hami_runtime.flags import Flag, parse_bool

__all__ = [
    "DEFAULT_CDI_DIR",
    "DEFAULT_HOOK_PATH",
    "DEFAULT_METRICS_BIND",
    "DEFAULT_MIG_LOCK_FILE",
    "DEFAULT_NODE_CONFIG_FILE",
    "DEFAULT_RDMA_RESOURCE",
    "FLAGS",
    "FLAG_TO_CONFIG",
    "MODES",
    "build_parser",
    "parse_tristate",
]

DEFAULT_HOOK_PATH: Final = "/usr/local"
DEFAULT_RDMA_RESOURCE: Final = RDMA_RESOURCE
DEFAULT_METRICS_BIND: Final = ":9397"
DEFAULT_NODE_CONFIG_FILE: Final = "/config/config.json"
DEFAULT_MIG_LOCK_FILE: Final = "/tmp/hami/hami-mig-apply.lock"
DEFAULT_CDI_DIR: Final = "/var/run/cdi"
MODES: Final = ("device-plugin", "dra")


def parse_tristate(text: str) -> bool | str:
    """``auto`` or a Go boolean."""
    if text.strip().lower() == "auto":
        return "auto"
    return parse_bool(text)


def _only(allowed: str, what: str) -> Callable[[str], str]:
    def check(text: str) -> str:
        if text != allowed:
            raise argparse.ArgumentTypeError(
                f"{what} {text!r} is not supported by this device plugin (only {allowed!r})"
            )
        return text

    return check


FLAGS: Final = (
    Flag(("--node-name",), "node_name", None, "this node's name", env="NODE_NAME"),
    Flag(
        ("--config-file",),
        "config_file",
        None,
        "device-config.yaml (the nvidia section is read)",
        env="CONFIG_FILE",
    ),
    Flag(
        ("--node-config-file",),
        "node_config_file",
        None,
        f"per-node config.json (default {DEFAULT_NODE_CONFIG_FILE} when it exists)",
        env="NODE_CONFIG_FILE",
    ),
    Flag(
        ("--device-split-count",),
        "device_split_count",
        None,
        "tasks per GPU",
        flags.positive_int,
        env="DEVICE_SPLIT_COUNT",
    ),
    Flag(
        ("--device-memory-scaling",),
        "device_memory_scaling",
        None,
        "registered memory factor",
        flags.positive_number,
        env="DEVICE_MEMORY_SCALING",
    ),
    Flag(
        ("--device-cores-scaling",),
        "device_cores_scaling",
        None,
        "registered core factor",
        flags.positive_number,
        env="DEVICE_CORES_SCALING",
    ),
    Flag(
        ("--disable-core-limit",),
        "disable_core_limit",
        None,
        "set GPU_CORE_UTILIZATION_POLICY=disable in containers",
        is_bool=True,
        env="DISABLE_CORE_LIMIT",
    ),
    Flag(
        ("--resource-name",),
        "resource_name",
        None,
        "resource advertised to the kubelet",
        env="RESOURCE_NAME",
    ),
    Flag(
        ("--kubelet-socket",),
        "kubelet_socket",
        KUBELET_SOCKET,
        "kubelet registration socket",
        env="KUBELET_SOCKET",
    ),
    Flag(
        ("--pod-resources-socket",),
        "pod_resources_socket",
        POD_RESOURCES_SOCKET,
        "the kubelet's pod-resources socket (which pod an Allocate is for); 'none': not used",
    ),
    Flag(
        ("--mig-strategy",),
        "mig_strategy",
        "none",
        "only 'none'",
        _only("none", "MIG strategy"),
        env="MIG_STRATEGY",
    ),
    Flag(
        ("--device-list-strategy",),
        "device_list_strategy",
        "envvar",
        "only 'envvar'",
        _only("envvar", "device list strategy"),
        env="DEVICE_LIST_STRATEGY",
    ),
    Flag(
        ("--fail-on-init-error",),
        "fail_on_init_error",
        "true",
        "exit when the GPU backend cannot start (else run with no GPUs)",
        is_bool=True,
        env="FAIL_ON_INIT_ERROR",
    ),
    Flag(
        ("--enable-topology-score",),
        "enable_topology_score",
        "false",
        "write GPU pair link scores (hami.io/node-nvidia-score) for topology-aware placement",
        is_bool=True,
        env="ENABLE_TOPOLOGY_SCORE",
    ),
    Flag(
        ("--advertise-capacity-totals",),
        "advertise_capacity_totals",
        "false",
        "advertise hami.io/nvidia-memory and hami.io/nvidia-cores in node status capacity "
        "(the capacity totals mode; off: remove them if a previous run left them)",
        is_bool=True,
    ),
    Flag(
        ("--hook-path",),
        "hook_path",
        DEFAULT_HOOK_PATH,
        "where HAMi-core lives on the host",
        env="HOOK_PATH",
    ),
    Flag(("--device-backend",), "device_backend", "nvml", "GPU backend", choices=("nvml", "fake")),
    Flag(("--fake-devices",), "fake_devices", None, "YAML file of the fake backend"),
    Flag(("--sysfs-root",), "sysfs_root", "/sys", "sysfs mount point"),
    Flag(
        ("--host-root",),
        "host_root",
        "/",
        "host files are under this directory; 'none' touches no host files",
    ),
    Flag(
        ("--socket-name",),
        "socket_name",
        None,
        "plugin socket file name (default from resource)",
    ),
    *flags.process_flags(metrics_bind=DEFAULT_METRICS_BIND),
    Flag(
        ("--register-interval",),
        "register_interval",
        "30",
        "seconds between node registrations",
        flags.positive_number,
    ),
    Flag(
        ("--register-retry-interval",),
        "register_retry_interval",
        "5",
        "seconds before retrying a failed registration",
        flags.positive_number,
    ),
    Flag(
        ("--kubelet-poll-interval",),
        "kubelet_poll_interval",
        "1",
        "seconds between kubelet.sock checks",
        flags.positive_number,
    ),
    Flag(
        ("--fake-mig-state",),
        "fake_mig_state",
        None,
        "where the fake backend keeps its GPUs' MIG layout across restarts "
        "(default: <fake devices file>.mig-state.json)",
    ),
    Flag(
        ("--fake-poll-interval",),
        "fake_poll_interval",
        "1",
        "seconds between re-reads of the fake devices file",
        flags.positive_number,
    ),
    Flag(
        ("--enable-rdma",),
        "enable_rdma",
        "auto",
        "serve the RDMA NIC plugin: auto (when NICs are found at start), true or false",
        parse_tristate,
        is_bool=True,
    ),
    Flag(
        ("--rdma-resource-name",),
        "rdma_resource_name",
        DEFAULT_RDMA_RESOURCE,
        "resource the RDMA plugin advertises (100 units per NIC)",
    ),
    Flag(
        ("--rdma-socket-name",),
        "rdma_socket_name",
        None,
        "RDMA plugin socket file name (default from its resource)",
    ),
    Flag(
        ("--rdma-discovery",),
        "rdma_discovery",
        None,
        "where RDMA NICs come from (default fake with the fake backend, else sysfs)",
        choices=("sysfs", "fake"),
    ),
    Flag(
        ("--rdma-poll-interval",),
        "rdma_poll_interval",
        "10",
        "seconds between RDMA NIC rescans",
        flags.positive_number,
    ),
    Flag(
        ("--mig-lock-file",),
        "mig_lock_file",
        DEFAULT_MIG_LOCK_FILE,
        "file that exists while the MIG layout changes (the vGPU monitor pauses meanwhile)",
    ),
    Flag(
        ("--mig-reconcile-interval",),
        "mig_reconcile_interval",
        "5",
        "seconds between looks for MIG instances no live pod references",
        flags.positive_number,
    ),
    Flag(
        ("--mode",),
        "mode",
        "device-plugin",
        "how the node's GPUs reach pods: the device-plugin protocol or DRA (a kubelet DRA "
        "plugin publishing ResourceSlices); never both",
        choices=MODES,
    ),
    Flag(
        ("--kubelet-dir",),
        "kubelet_dir",
        KUBELET_DIR,
        "the kubelet's root directory (DRA: plugins_registry/ and plugins/ are in it)",
    ),
    Flag(("--cdi-dir",), "cdi_dir", DEFAULT_CDI_DIR, "DRA: where per-claim CDI spec files go"),
    Flag(
        ("--dra-state-dir",),
        "dra_state_dir",
        None,
        "DRA: the checkpoint's directory (default <kubelet dir>/plugins/gpu.hami.io)",
    ),
    Flag(
        ("--slice-resync-interval",),
        "slice_resync_interval",
        "10",
        "DRA: seconds between checks that the node's ResourceSlice is published",
        flags.positive_number,
    ),
    Flag(
        ("--allocate-timeout",),
        "allocate_timeout",
        "3",
        "deadline of one Allocate, API calls included",
        flags.positive_number,
    ),
)


def build_parser() -> argparse.ArgumentParser:
    """The flag parser.  Defaults are ``None`` so explicit flags can be told apart."""
    return flags.build_explicit_parser(
        prog="hami-deviceplugin",
        description="Kubelet device plugin and node registration for shared GPUs.",
        flags=FLAGS,
    )


FLAG_TO_CONFIG: Final = {
    "device_split_count": "deviceSplitCount",
    "device_memory_scaling": "deviceMemoryScaling",
    "device_cores_scaling": "deviceCoreScaling",
    "disable_core_limit": "disableCoreLimit",
    "resource_name": "resourceCountName",
}
"""Flags that, when given, override these ``nvidia`` keys of ``device-config.yaml``."""
