"""GPU + RDMA NIC joint allocation (Koordinator): hints, NIC usage and fit, the joint decision
and its annotations.  Pure."""
