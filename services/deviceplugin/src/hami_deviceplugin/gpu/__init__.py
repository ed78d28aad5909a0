"""The GPU plugin: backends (nvml, fake), the inventory and its replicas, the pure Allocate plan,
the allocator that runs it and the servicer the kubelet calls."""
