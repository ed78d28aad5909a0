"""Device plugin service: reports a node's GPUs and RDMA NICs to the scheduler (node annotations)
and to the kubelet (device-plugin gRPC, one plugin per resource), and turns the scheduler's
per-pod decision into what the container needs when the kubelet calls ``Allocate``: HAMi-core's
env vars and mounts for GPUs, uverbs/rdma_cm device specs for NICs.

Modules: ``settings`` (flags → :class:`~hami_deviceplugin.settings.Settings`), ``app`` and
``rdma_wiring`` (wiring), ``backends`` (nvml, fake; NIC sources sysfs and fake), ``sysfs`` and
``rdma_sysfs`` (topology and NIC discovery), ``inventory`` / ``nic_inventory`` (current devices,
change notification), ``nics``, ``register`` / ``replicas`` / ``allocate`` / ``rdma_allocate`` /
``pending`` (pure decisions), ``registrar`` (node annotation loop), ``podlookup`` +
``allocation_flow`` + ``allocator`` / ``rdma_allocator`` + ``hostdirs`` (the Allocate paths),
``grpc_server`` / ``rdma_grpc`` and ``kubelet_link`` (kubelet API), ``metrics``.
"""
