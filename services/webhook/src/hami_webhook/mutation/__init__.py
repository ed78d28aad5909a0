"""The webhook's pure core: the admission decision for one pod, and the edits it is made of.

Nothing here awaits or performs I/O.  :func:`~hami_webhook.mutation.admit.admit_pod` takes the
pod as decoded JSON, the :class:`~hami_webhook.mutation.rules.MutationRules` and a quota view and
returns a :class:`~hami_webhook.mutation.decision.Decision`; its module docstring states the rules
in HAMi's order.

Modules: ``admit`` (the decision, rule by rule), ``rules`` (what it depends on), ``decision``
(what it answers), ``containers`` (the pass over every container), ``nvidia`` (NVIDIA's
defaults), ``vendors/`` (every other vendor's rule), ``metadata`` (pod annotations the pass
writes or drops), ``quota_denial`` (the pod's devices against namespace quotas), ``totals``
(capacity totals), ``edits`` (container readers and writers), ``patch`` (the JSON Patch diff).
"""
