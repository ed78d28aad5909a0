"""The GPU plugin: backends (nvml, fake), the inventory and its replicas, the pure Allocate
plan and the allocator that runs it."""
