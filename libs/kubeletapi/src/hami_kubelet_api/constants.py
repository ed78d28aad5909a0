"""Constants of the kubelet device-plugin API v1beta1 (kubelet's ``constants.go`` and lifecycle)
and of its pod-resources endpoint.

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

__all__ = [
    "DEPRECATION_MARKER_FILE",
    "DEVICE_PLUGIN_PATH",
    "DEVICE_PLUGIN_PATH_WINDOWS",
    "DEVICE_PLUGIN_SERVICE",
    "ENDPOINT_STOP_GRACE_PERIOD_SECONDS",
    "HEALTHY",
    "KUBELET_CHECKPOINT_FILE",
    "KUBELET_PRE_START_CONTAINER_RPC_TIMEOUT_SECONDS",
    "KUBELET_REGISTER_DIAL_TIMEOUT_SECONDS",
    "KUBELET_SOCKET",
    "KUBELET_SOCKET_NAME",
    "KUBELET_SOCKET_WINDOWS",
    "POD_RESOURCES_PATH",
    "POD_RESOURCES_SERVICE",
    "POD_RESOURCES_SOCKET",
    "REGISTRATION_SERVICE",
    "SUPPORTED_VERSIONS",
    "UNHEALTHY",
    "VERSION",
]
