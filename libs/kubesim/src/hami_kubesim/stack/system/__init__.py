"""Running the whole system on one machine: kubesim plus the three services as real processes.

:mod:`.spec` says what to run (GPU nodes, service options; plain frozen data) and
:mod:`.objects` the Kubernetes objects the stack creates; :mod:`.services` turns a spec into
each service's flags, ports (picked by :mod:`.ports`), certificates and log files, and
:mod:`.processes` runs them
(:mod:`.router` fronts replicated extenders); :mod:`.lifecycle` (``running_system``) starts it all
and stops it, handing out a :class:`~.handle.System` (its views, actions and waits) meanwhile;
:mod:`.settle` waits on the cluster with deadlines.
"""
