"""Judging a cluster snapshot (:class:`~hami_kubesim.stack.state.ClusterState`); pure, no I/O.

:mod:`.invariants` — what must hold whatever faults happened (every check by name, with
:mod:`.locks` for the node-lock rule, :mod:`.mig` and :mod:`.vendors` for dynamic MIG and the
other vendors' devices); :mod:`.usage` — what the vGPU monitors report per container, against
what was allocated; :mod:`.expectations` — the outcomes the demo's example pods expect, and
whether they happened.
"""
