"""The whole system on kubesim: the three services as processes, snapshots, checks, reports.

* :mod:`.spec` — what to run (GPU nodes, service options); :mod:`.services` — each service's
  flags, ports and certificates; :mod:`.system` — ``running_system`` starts kubesim and the
  services (:mod:`.processes`, :mod:`.router` for extender replicas);
* :mod:`.state` — a cluster snapshot (with the pods the scheduling loop will retry, and a
  timeline of node locks and pods when one was recorded) and what the services wrote in it;
  :mod:`.settle` — waits with deadlines; :mod:`.metrics` — the services' Prometheus metrics;
* :mod:`.invariants` — what must hold after any fault; :mod:`.report` and
  :mod:`.expectations` — the demo's output and its expected outcomes; :mod:`.usage` — what the
  vGPU monitors report per container, checked against the allocation;
* :mod:`.scenarios` and :mod:`.incidents` (pure) and :mod:`.chaos` — seeded fault scenarios,
  the bind-path incidents they may contain, and their runner.

New device kinds (RDMA NICs, topology) plug in at three places: ``GpuNode.nics`` feeds the
fake backend, :data:`.invariants.CHECKS` takes one more check function, and the report gains a
section next to the GPU utilisation.
"""
