"""Mutating admission webhook service: routes pods that request shared devices to the HAMi
scheduler, fills in HAMi's request defaults and checks namespace device quotas.

Modules: ``settings`` (flags → frozen Settings), ``mutate`` (the pure decision), ``patch`` (JSON
Patch diff), ``review`` (AdmissionReview codec), ``quota`` (quota cache and check),
``quota_watch`` (the watches feeding it), ``metrics``, ``http`` (aiohttp routes), ``app``
(wiring and lifecycle).
"""
