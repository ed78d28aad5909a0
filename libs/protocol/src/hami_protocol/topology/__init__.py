"""Where devices sit and how they are allocated together: PCIe/NUMA layout, the RDMA register,
GPU links and their pair scores, Koordinator's joint-allocation annotations."""
