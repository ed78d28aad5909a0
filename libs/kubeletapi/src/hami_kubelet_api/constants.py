"""Constants of the kubelet device-plugin API v1beta1 (kubelet's ``constants.go`` and lifecycle),
of its pod-resources endpoint, and of the plugin watcher and DRA services.

Names are the Go names in upper snake case: ``Version`` -> ``VERSION``,
``DevicePluginPath`` -> ``DEVICE_PLUGIN_PATH``, ``KubeletSocket`` -> ``KUBELET_SOCKET``, ...
"""

from typing import Final

HEALTHY: Final = "Healthy"
"""``Device.health`` of a device that counts as allocatable."""
UNHEALTHY: Final = "Unhealthy"
"""``Device.health`` of a device that counts only towards capacity."""

VERSION: Final = "v1beta1"
"""``RegisterRequest.version`` the kubelet accepts."""
SUPPORTED_VERSIONS: Final = (VERSION,)

DEVICE_PLUGIN_PATH: Final = "/var/lib/kubelet/device-plugins/"
"""Directory of kubelet.sock and every plugin socket (trailing slash, as upstream)."""
KUBELET_SOCKET_NAME: Final = "kubelet.sock"
KUBELET_SOCKET: Final = DEVICE_PLUGIN_PATH + KUBELET_SOCKET_NAME
DEVICE_PLUGIN_PATH_WINDOWS: Final = "\\var\\lib\\kubelet\\device-plugins\\"
KUBELET_SOCKET_WINDOWS: Final = DEVICE_PLUGIN_PATH_WINDOWS + KUBELET_SOCKET_NAME

KUBELET_PRE_START_CONTAINER_RPC_TIMEOUT_SECONDS: Final = 30
"""Deadline the kubelet gives ``PreStartContainer``."""
KUBELET_REGISTER_DIAL_TIMEOUT_SECONDS: Final = 10
"""How long the kubelet's ``Register`` handler waits to dial the plugin back."""
ENDPOINT_STOP_GRACE_PERIOD_SECONDS: Final = 300
"""How long the kubelet keeps a disconnected plugin's resource before dropping it."""

KUBELET_CHECKPOINT_FILE: Final = "kubelet_internal_checkpoint"
"""Checkpoint file the kubelet keeps in ``DEVICE_PLUGIN_PATH``."""
DEPRECATION_MARKER_FILE: Final = "DEPRECATION"
"""Empty marker file recent kubelets create in ``DEVICE_PLUGIN_PATH``."""

POD_RESOURCES_PATH: Final = "/var/lib/kubelet/pod-resources/"
"""Directory of the kubelet's pod-resources socket."""
POD_RESOURCES_SOCKET: Final = POD_RESOURCES_PATH + KUBELET_SOCKET_NAME
"""The kubelet's ``v1.PodResourcesLister`` (which devices the node's pods hold)."""
POD_RESOURCES_SERVICE: Final = "v1.PodResourcesLister"

REGISTRATION_SERVICE: Final = "v1beta1.Registration"
DEVICE_PLUGIN_SERVICE: Final = "v1beta1.DevicePlugin"

# --- kubelet plugin watcher and DRA (k8s.io/kubelet pluginregistration v1, dra v1/v1beta1) ------

KUBELET_DIR: Final = "/var/lib/kubelet"
"""The kubelet's root directory; the plugin watcher's and the DRA sockets' directories are in it."""
PLUGINS_REGISTRY_DIR_NAME: Final = "plugins_registry"
"""``<kubelet dir>/plugins_registry``: the plugin watcher picks up registration sockets here."""
PLUGINS_DIR_NAME: Final = "plugins"
"""``<kubelet dir>/plugins/<driver>/``: where a DRA driver's service socket conventionally lives."""
PLUGIN_REGISTRATION_SERVICE: Final = "pluginregistration.Registration"
DRA_PLUGIN_TYPE: Final = "DRAPlugin"
"""``PluginInfo.type`` of a DRA driver."""
DRA_V1_SERVICE: Final = "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
DRA_V1BETA1_SERVICE: Final = "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin"
DRA_V1_VERSION: Final = "v1.DRAPlugin"
"""``PluginInfo.supported_versions`` entry for the v1 service (kubelet 1.34+)."""
DRA_V1BETA1_VERSION: Final = "v1beta1.DRAPlugin"
"""``PluginInfo.supported_versions`` entry for the v1beta1 service (kubelet 1.32+)."""
DRA_CALL_TIMEOUT_SECONDS: Final = 45
"""The deadline the kubelet gives each DRA call."""

__all__ = [
    "DEPRECATION_MARKER_FILE",
    "DEVICE_PLUGIN_PATH",
    "DEVICE_PLUGIN_PATH_WINDOWS",
    "DEVICE_PLUGIN_SERVICE",
    "DRA_CALL_TIMEOUT_SECONDS",
    "DRA_PLUGIN_TYPE",
    "DRA_V1BETA1_SERVICE",
    "DRA_V1BETA1_VERSION",
    "DRA_V1_SERVICE",
    "DRA_V1_VERSION",
    "ENDPOINT_STOP_GRACE_PERIOD_SECONDS",
    "HEALTHY",
    "KUBELET_CHECKPOINT_FILE",
    "KUBELET_DIR",
    "KUBELET_PRE_START_CONTAINER_RPC_TIMEOUT_SECONDS",
    "KUBELET_REGISTER_DIAL_TIMEOUT_SECONDS",
    "KUBELET_SOCKET",
    "KUBELET_SOCKET_NAME",
    "KUBELET_SOCKET_WINDOWS",
    "PLUGINS_DIR_NAME",
    "PLUGINS_REGISTRY_DIR_NAME",
    "PLUGIN_REGISTRATION_SERVICE",
    "POD_RESOURCES_PATH",
    "POD_RESOURCES_SERVICE",
    "POD_RESOURCES_SOCKET",
    "REGISTRATION_SERVICE",
    "SUPPORTED_VERSIONS",
    "UNHEALTHY",
    "VERSION",
]
