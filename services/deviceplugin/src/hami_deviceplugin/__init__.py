"""Device plugin service: reports a node's GPUs to the scheduler (node annotations) and to the
kubelet (device-plugin gRPC), and turns the scheduler's per-pod decision into the env vars and
mounts HAMi-core needs when the kubelet calls ``Allocate``.

Modules: ``settings`` (flags → :class:`~hami_deviceplugin.settings.Settings`), ``app`` (wiring),
``backends`` (nvml, fake), ``sysfs``, ``inventory`` (current GPUs, change notification),
``register`` / ``replicas`` / ``allocate`` (pure decisions), ``registrar`` (node annotation loop),
``podlookup`` + ``allocator`` + ``hostdirs`` (the Allocate path), ``grpc_server`` and
``kubelet_link`` (kubelet API), ``metrics``.
"""
