"""The API server's HTTP face: :mod:`.app` (the aiohttp application over an
:class:`~hami_kubesim.apiserver.server.ApiServer`), :mod:`.routing` (request paths to targets),
:mod:`.discovery` and :mod:`.openapi` (what kubectl and clients read to map kinds to URLs),
:mod:`.watch` (the HTTP watch stream) and :mod:`.admin` (the ``/_sim`` control endpoints)."""
