"""The whole system on kubesim: the three services as processes, snapshots, checks, reports.

* :mod:`.system` — running it: what to run (:mod:`.system.spec`: GPU nodes, service options;
  :mod:`.system.objects`: the objects it creates), each service's flags, ports and certificates
  (:mod:`.system.services`), the processes (:mod:`.system.processes`, :mod:`.system.router` for
  extender replicas), ``running_system`` (:mod:`.system.lifecycle`), the
  :class:`~.system.handle.System` it hands out, and waits with deadlines (:mod:`.system.settle`);
* :mod:`.state` — a cluster snapshot (with the pods the scheduling loop will retry, and a
  timeline of node locks and pods when one was recorded) and what the services wrote in it;
  :mod:`.metrics` — the services' Prometheus metrics; :mod:`.report` and :mod:`.vendor_report` —
  the demo's output;
* :mod:`.checks` — judging it: what must hold after any fault (:mod:`.checks.invariants`), what
  the vGPU monitors report per container, checked against the allocation
  (:mod:`.checks.usage`), and the demo's expected outcomes (:mod:`.checks.expectations`);
* :mod:`.chaos` — seeded fault scenarios (:mod:`.chaos.scenarios`, pure), the bind-path
  incidents they may contain (:mod:`.chaos.incidents`, pure) and their runner.

Dependencies point one way: :mod:`.chaos` uses :mod:`.system`, :mod:`.checks` and :mod:`.state`;
:mod:`.system` uses :mod:`.checks` (the monitors' usage), :mod:`.metrics` and :mod:`.state`; the
reports use :mod:`.checks` and :mod:`.state`; :mod:`.checks` uses :mod:`.state` only; and
:mod:`.state` and :mod:`.metrics` use nothing of the stack.

New device kinds (RDMA NICs, topology) plug in at three places: ``GpuNode.nics`` feeds the
fake backend, :data:`.checks.invariants.CHECKS` takes one more check function, and the report
gains a section next to the GPU utilisation.
"""
