"""How one kubelet stand-in runs (:class:`KubeletSettings`), and where it serves pod-resources.

Apart from the stand-in (:mod:`.standin`) so that what only needs to know where a node's kubelet
serves (the service flags of a whole system, a cluster's config) does not import the stand-in.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hami_kubelet_api.constants import (
    ENDPOINT_STOP_GRACE_PERIOD_SECONDS,
    KUBELET_REGISTER_DIAL_TIMEOUT_SECONDS,
    KUBELET_SOCKET_NAME,
)
from hami_kubesim.kubelet.pods.workloads import DEFAULT_INTERVAL_S

__all__ = ["KubeletSettings", "beside", "pod_resources_socket_for"]


@dataclass(frozen=True, slots=True)
class KubeletSettings:
    """How one kubelet stand-in runs.

    ``plugin_dir`` plays ``/var/lib/kubelet/device-plugins/``; keep its path short (unix socket
    paths are limited to 107 bytes). ``pod_resources_dir`` plays
    ``/var/lib/kubelet/pod-resources/`` (default: beside the plugin dir, named
    ``<plugin dir>-pod-resources``). ``pod_cidr`` is where pod IPs come from; ``host_ip`` is used
    when the node object has no ``InternalIP`` address. ``admission_delay`` makes every
    admission start that many seconds late (see :mod:`.pods.admission`; changeable while it runs).
    ``host_root`` is the node's host filesystem as the device plugin's ``--host-root`` sees it:
    when set, the containers play HAMi-core there (see :mod:`.pods.lifecycle`), writing their
    usage every ``workload_interval`` seconds; ``None`` (the default) writes no file.

    DRA (:mod:`.dra`): ``plugins_registry_dir`` plays ``/var/lib/kubelet/plugins_registry/``
    (default ``<plugin dir>-plugins_registry`` beside the plugin dir), polled every
    ``plugin_watch_interval`` seconds; ``cdi_spec_dirs`` are the CDI spec directories the
    node's runtime reads, lowest priority first (default ``(<plugin dir>-cdi,)``, playing
    ``/var/run/cdi``); a pod whose claims could not be prepared is tried again every
    ``dra_retry_interval`` seconds (the kubelet's pod-worker backoff), as are failed unprepares.
    """

    node_name: str
    plugin_dir: Path
    api_url: str
    pod_cidr: str = "10.244.0.0/24"
    host_ip: str = "127.0.0.1"
    dial_timeout: float = float(KUBELET_REGISTER_DIAL_TIMEOUT_SECONDS)
    call_timeout: float = 60.0
    """Deadline for GetPreferredAllocation/Allocate (the kubelet sets none; a safeguard here)."""
    grace_period: float = float(ENDPOINT_STOP_GRACE_PERIOD_SECONDS)
    pod_resources_dir: Path | None = None
    admission_delay: float = 0.0
    host_root: Path | None = None
    workload_interval: float = DEFAULT_INTERVAL_S
    stop_wait_cap: float = 30.0
    """The longest a pod that ignores SIGTERM takes to stop (its grace period, at most this)."""

    plugins_registry_dir: Path | None = None
    plugin_watch_interval: float = 1.0
    cdi_spec_dirs: tuple[Path, ...] | None = None
    dra_call_timeout: float = 45.0
    """The kubelet's deadline for NodePrepareResources / NodeUnprepareResources."""
    dra_retry_interval: float = 10.0

    @property
    def pod_resources_socket(self) -> Path:
        return pod_resources_socket_for(self.plugin_dir, self.pod_resources_dir)

    @property
    def registry_dir(self) -> Path:
        """Where DRA drivers put their registration sockets."""
        return self.plugins_registry_dir or beside(self.plugin_dir, "plugins_registry")

    @property
    def cdi_dirs(self) -> tuple[Path, ...]:
        """The CDI spec directories, lowest priority first."""
        if self.cdi_spec_dirs is not None:
            return self.cdi_spec_dirs
        return (beside(self.plugin_dir, "cdi"),)


def beside(plugin_dir: Path, what: str) -> Path:
    """``<plugin dir>-<what>``: a node directory next to its plugin dir (kept out of the plugin
    dir, whose sockets a kubelet restart deletes)."""
    return plugin_dir.with_name(f"{plugin_dir.name}-{what}")


def pod_resources_socket_for(plugin_dir: Path, pod_resources_dir: Path | None = None) -> Path:
    """Where a kubelet stand-in serving in ``plugin_dir`` serves pod-resources: in
    ``pod_resources_dir``, by default ``<plugin dir>-pod-resources`` beside the plugin dir."""
    directory = pod_resources_dir or beside(plugin_dir, "pod-resources")
    return directory / KUBELET_SOCKET_NAME
