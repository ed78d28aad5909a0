"""From a pod in a request to a core decision over the cache: plans, the joint side, and the one
rule that picks HAMi's path or the joint one."""
