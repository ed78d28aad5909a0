"""Namespace quotas on device memory and cores.

``check`` (pure) is the admission check over a quota view; ``cache`` keeps that view (limits
from ResourceQuota objects, usage from placed pods); ``watch`` feeds the cache from the API
server.
"""
