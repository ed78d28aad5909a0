"""Pins the public API: a rename or removal must be a deliberate change here."""

from __future__ import annotations

import importlib

import pytest

PUBLIC_API = {
    "hami_kube.backoff": {
        "Backoff",
        "BackoffPolicy",
    },
    "hami_kube.config": {
        "ConfigSource",
        "KubeSettings",
        "config_source",
        "create_api_client",
        "load_configuration",
    },
    "hami_kube.errors": {
        "AlreadyExistsError",
        "ApiError",
        "BadRequestError",
        "ConflictError",
        "ExpiredError",
        "ForbiddenError",
        "InvalidError",
        "KubeError",
        "NotFoundError",
        "ServerError",
        "TooManyRequestsError",
        "TransportError",
        "UnauthorizedError",
        "UnsupportedMediaTypeError",
        "api_error",
        "error_class",
        "is_retryable",
        "parse_status",
    },
    "hami_kube.events": {
        "CLUSTER_SCOPED_EVENT_NAMESPACE",
        "EventRecorder",
        "EventType",
        "MAX_MESSAGE_LENGTH",
        "MAX_REASON_LENGTH",
        "ObjectReference",
        "build_event",
    },
    "hami_kube.leaderelection": {
        "Callback",
        "JITTER_FACTOR",
        "LeaderElectionConfig",
        "LeaderElector",
        "LeaseRecord",
        "NewLeaderCallback",
    },
    "hami_kube.patch": {
        "DEFAULT_CONFLICT_BACKOFF",
        "DEFAULT_RETRY_BACKOFF",
        "Mutation",
        "metadata_patch",
        "patch_metadata",
        "update_with_retry",
        "with_retries",
    },
    "hami_kube.ratelimit": {
        "TokenBucket",
    },
    "hami_kube.reflector": {
        "AddHandler",
        "AfterListHandler",
        "BeforeListHandler",
        "DeleteHandler",
        "EventHandlers",
        "Reflector",
        "ReflectorConfig",
        "ReflectorGroup",
        "ReflectorStats",
        "UpdateHandler",
        "upserting",
    },
    "hami_kube.objects": {
        "TERMINAL_POD_PHASES",
        "ContainerView",
        "NodeView",
        "ObjectView",
        "PodView",
        "key_for",
        "object_key",
        "string_map",
    },
    "hami_kube.resources": {
        "CONFIGMAPS",
        "ENDPOINT_SLICES",
        "EVENTS",
        "JsonObject",
        "LEASES",
        "MUTATING_WEBHOOK_CONFIGURATIONS",
        "NAMESPACES",
        "NODES",
        "PODS",
        "RESOURCE_QUOTAS",
        "Resource",
    },
    "hami_kube.rest": {
        "JSON",
        "KubeClient",
        "PatchType",
        "Query",
        "QueryValue",
        "WATCH_EVENT_TYPES",
        "WatchEvent",
        "WatchEventType",
        "open_client",
        "parse_watch_line",
    },
    "hami_kube.store": {
        "Indexer",
        "Store",
        "StoreDelta",
        "index_by_namespace",
        "index_by_node_name",
    },
    "hami_kube.timefmt": {
        "format_microtime",
        "format_time",
        "parse_time",
        "utc_now",
    },
    "hami_kubelet_api.constants": {
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
    },
}


@pytest.mark.parametrize("module_name", sorted(PUBLIC_API))
def test_public_api_is_pinned(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert set(module.__all__) == PUBLIC_API[module_name]
    for name in module.__all__:
        assert hasattr(module, name), name
