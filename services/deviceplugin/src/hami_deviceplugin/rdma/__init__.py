"""The RDMA NIC plugin: NIC discovery and sources, the inventory, the pure Allocate plan, the
allocator and the servicer."""
