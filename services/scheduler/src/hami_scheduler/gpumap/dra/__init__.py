"""GPUs managed through DRA (docs/dra.md) on the GPU map, read-only.

A node whose device plugin runs ``--mode dra`` withdraws its HAMi register annotations and
publishes a ``resource.k8s.io/v1`` ResourceSlice of driver ``gpu.hami.io`` instead;
kube-scheduler's allocator places claims on it, not this extender.  The map still shows those
cards and who holds them: :mod:`.read` reads slices and claims into plain facts, :mod:`.join`
joins them into per-node cards, :mod:`.document` writes the cards' JSON.  All pure; the watch
feeding them is :mod:`hami_scheduler.cache.dra`.
"""
