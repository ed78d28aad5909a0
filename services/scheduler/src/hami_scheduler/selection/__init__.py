"""From a pod in a request to a core decision over the cache: plans, the joint side, and the
record of a decision.  Which core path a pod takes is :mod:`hami_scheduler.core.joint.route`'s
rule."""
