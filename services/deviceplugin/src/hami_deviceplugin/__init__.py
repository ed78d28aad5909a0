"""Device plugin service: reports a node's GPUs and RDMA NICs to the scheduler (node annotations)
and to the kubelet (device-plugin gRPC, one plugin per resource), and turns the scheduler's
per-pod decision into what the container needs when the kubelet calls ``Allocate``: HAMi-core's
env vars and mounts for GPUs, uverbs/rdma_cm device specs for NICs.

Layout (pure modules take plain data and never await):

* ``__main__`` (process entry), ``cli_flags`` (the flag table) and ``settings`` (flags →
  :class:`~hami_deviceplugin.settings.Settings`); ``app`` (the wiring and the one lifecycle);
  ``metrics``; ``errors`` (pure: both error trees);
* ``allocation/``: the Allocate path every plugin shares: ``entries`` and ``pending`` (pure:
  serving the kubelet's requests from a pod's to-allocate list), ``identity`` (pure: which pod a
  call is for, or why none), ``decision`` (pure: what a plugin decides), ``node_pods`` (the
  node's pods from a watch), ``sources`` (what Allocate reads, and the lookup of the pod),
  ``node_lock`` (releasing the node lock), ``flow`` (identify, decide, commit, unlock, fail);
* ``kubelet/``: ``server`` (the unix-socket gRPC server), ``servicer`` (what both plugins'
  services share), ``link`` (staying registered with the kubelet), ``podresources`` (the
  kubelet's pod-resources API, the first source of identity);
* ``node/``: ``register`` (pure: the node annotations owed) and ``registrar`` (the loop writing
  them);
* ``devices/``: what both plugins' device lists are built from and on: ``sysfs`` (PCIe/NUMA
  topology), ``fake_file`` (the fake devices file), ``change_feed`` (inventories and their change
  notification);
* ``gpu/``: ``backends/`` (nvml, fake), ``inventory``, ``replicas`` and ``plan`` (pure),
  ``hostdirs`` (host directories for HAMi-core), ``allocator``, ``servicer``, ``nvml_smoke`` (a
  check on a real GPU machine);
* ``rdma/``: ``discovery`` (sysfs), ``sources`` (sysfs and fake NIC sources), ``nics`` and
  ``plan`` (pure), ``inventory``, ``allocator``, ``servicer``, ``wiring``;
* ``monitor/``: the vGPU monitor (``hami-vgpu-monitor``, a process of its own beside the plugin):
  per-container usage from HAMi-core's shared regions, HAMi's host GPU gauges and the priority
  feedback; it shares the GPU backends and ``metric_labels`` (the ``zone`` label and the host
  label set) with the plugin.
"""
