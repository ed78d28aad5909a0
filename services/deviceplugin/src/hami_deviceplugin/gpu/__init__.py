"""The GPU plugin: backends (nvml, fake), the inventory and its replicas, the pure Allocate plan,
the host directories HAMi-core needs, the allocator that runs the plan and the servicer the kubelet
calls."""
