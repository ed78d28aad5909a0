"""In-memory Kubernetes API server and control-plane stand-ins, for tests and the demo.

Folders by layer: :mod:`.objects` (pure: resource types, strategies, validation, patches),
:mod:`.apiserver` (the store, watches and the HTTP face), :mod:`.admission` (mutating webhook
dispatch), :mod:`.scheduler` (kube-scheduler's stand-in), :mod:`.kubelet` (the kubelet's
stand-in), :mod:`.cluster` (a whole simulated cluster from a file) and :mod:`.stack` (kubesim plus
the three services as processes: the demo, the end-to-end and fault suites).

Beside them: :mod:`.access` (how the stand-ins reach the API server), :mod:`.background_tasks`
(each stand-in's task, started and stopped within bounds), :mod:`.certs`, :mod:`.testing`
(``running_apiserver``, ``eventually``), :mod:`.pytest_plugin` (the ``sim``/``kube`` fixtures,
the leaked-task guard, the ``looptime`` marker), :mod:`.virtual_clock` (virtual time for an
event loop) and :mod:`.hamicore` (HAMi-core's shared region file, written as the in-container
limiter writes it).
"""
