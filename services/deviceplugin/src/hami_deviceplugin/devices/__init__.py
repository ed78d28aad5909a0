"""What both plugins' device lists (GPUs and RDMA NICs) are built from and on: ``sysfs`` (where
a PCI device sits: NUMA node, PCIe switch and root), ``fake_file`` (the fake devices file both
fake sources read) and ``change_feed`` (the value both inventories hold, and how a source's lists
reach it)."""
