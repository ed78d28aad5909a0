"""The RDMA NIC plugin: NIC discovery in sysfs, the NIC sources (sysfs, fake), the inventory,
the pure NIC model and Allocate plan, the allocator, the servicer and its wiring."""
