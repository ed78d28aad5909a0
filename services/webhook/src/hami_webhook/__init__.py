"""Mutating admission webhook service: routes pods that request shared devices to the HAMi
scheduler, fills in HAMi's request defaults and checks namespace device quotas.

Layout, pure core first:

* ``mutation/`` (pure): the admission decision for one pod (``admit``), its rules and answer,
  NVIDIA's defaults, every other vendor's rule (``vendors/``), capacity totals, the JSON Patch
  diff;
* ``dra/``: NVIDIA requests turned into DRA claims (``claims``, pure) and the writer that
  creates their ResourceClaimTemplates (``template_writer``, API I/O);
* ``quota/``: the namespace quota check (``check``, pure), the quota cache fed by watches
  (``cache``) and the watches (``watch``);
* ``admission/``: the AdmissionReview codec (``review``, pure) and the aiohttp routes answering
  reviews (``http``);
* ``settings`` (flags → frozen Settings), ``metrics``, ``app`` (wiring and lifecycle),
  ``__main__`` (``python -m hami_webhook`` and the ``hami-webhook`` script).
"""
