"""Where devices sit and how they are allocated together: PCIe/NUMA layout, the RDMA register,
Koordinator's joint-allocation annotations."""
