"""The bind and what keeps it going: from the filter's kept decision to the Binding.

:mod:`~hami_scheduler.bind.service` answers ``/bind`` (the pod, the decision, the Binding, and
the undo on any failure), taking the node locks through :mod:`~hami_scheduler.bind.locks`;
:mod:`~hami_scheduler.bind.pending` keeps the filter's decisions for their binds;
:mod:`~hami_scheduler.bind.upkeep` looks after overdue node locks and pending decisions whose
bind never came.  The node lock itself is :mod:`hami_scheduler.nodelock`'s.
"""
