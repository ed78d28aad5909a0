"""What the scheduler knows about one node: its devices, their capacity and what pods hold.

* :mod:`.device` — :class:`~.device.DeviceUsage`, one device's capacity (``count`` task slots,
  ``totalmem`` MiB, ``totalcore`` units) and what is held on it (``used`` slots, ``usedmem``,
  ``usedcores``), with the registration's ``custominfo`` as text;
* :mod:`.node` — :class:`~.node.NodeLayout`, what does not change when pods come and go (the
  node name, which devices belong to which vendor, the cordoned UUIDs and the GPU pair scores),
  and :class:`~.node.NodeUsage`, a layout plus the current :class:`~.device.DeviceUsage` of
  every device, with the node-wide sums the node score needs;
* :mod:`.open_devices` — the devices of one vendor able to take a request, sorted by free
  memory, that the quick verdict scans;
* :mod:`.apply` — a node built from its registry with its pods' usage, and moved as pods
  arrive and leave.

All values are immutable.  A pod's arrival or departure produces a *new* :class:`~.node.NodeUsage`
(:func:`~.apply.apply_usage` / :func:`~.apply.remove_usage`), costing O(devices of the pod +
devices of the node): the layout is shared, unchanged devices are shared, only touched devices
are rebuilt.  Immutable values mean a filter can read a consistent snapshot while the cache
moves on, and a changed node is recognisably a different object, which is what lets
:mod:`hami_scheduler.core.select` memoise per-node results.  Views the filter needs repeatedly —
:meth:`NodeUsage.open <.node.NodeUsage.open>` (devices able to take a request, sorted by free
memory) and :meth:`NodeUsage.derived <.node.NodeUsage.derived>` (e.g. the device order of a
policy) — are computed on first use and kept by that node version, so pod events stay cheap
and an unchanged node never recomputes them.
"""
