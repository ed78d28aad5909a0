"""``kubectl hami``: the scheduler's GPU map, its pending GPU pods and its fit probe, read from the
GPU map JSON API (``gpumap.hami.io/v1``) through the API server's service proxy with the user's
kubeconfig, so RBAC (``get`` on ``services/proxy``) decides who may look.

Pure parts: :mod:`.options` (the command line), :mod:`.probe` (the fit request), :mod:`.outcome`
(exit statuses and the messages of failures) and :mod:`.views` (the tables).  The one I/O module
is :mod:`.fetch`; :mod:`.__main__` ties them together.
"""
