"""The node lock (``hami.io/mutex.lock``) as the bind takes it: the guarded write
(:mod:`~hami_scheduler.nodelock.locker`), the owner's state from the caches
(:mod:`~hami_scheduler.nodelock.owners`) and the per-node line of binds waiting for it
(:mod:`~hami_scheduler.nodelock.waits`).  The decisions themselves are
:mod:`hami_protocol.node.lock`'s."""
