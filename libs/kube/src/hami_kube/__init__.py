"""Shared Kubernetes I/O for the services and the emulator's control-plane loops.

Modules (each small, each its own public surface):

- ``config``        ``KubeSettings``, ``create_api_client`` (URL, kubeconfig or in-cluster)
- ``rest``          ``KubeClient`` (raw-JSON verbs and watch streams), ``open_client``
- ``resources``     ``Resource`` paths (``PODS``, ``NODES``, ``LEASES``, ...), object accessors
- ``errors``        the exception hierarchy mapped from HTTP status
- ``store``         indexed local object cache
- ``reflector``     list+watch informer that keeps a ``Store`` equal to the server state
- ``patch``         metadata merge patches, conflict-aware read-modify-write, transient retries
- ``events``        ``EventRecorder`` (core/v1 Events with aggregation; never raises)
- ``leaderelection`` Lease-based ``LeaderElector`` (client-go's algorithm)
- ``backoff``, ``ratelimit``, ``timefmt``  small pure helpers

It never serves: the service runtime is ``hami_runtime``, the kubelet API ``hami_kubelet_api``.
"""
