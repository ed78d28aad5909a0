"""The GPU map: read-only documents built from the scheduler's own state (issue 25).

Pure builders (:mod:`.model`, :mod:`.pending`, :mod:`.fit`) turn the cache's frozen state into
the JSON documents of ``docs/gpumap.md``; :mod:`.server` serves them and the HTML page that
:mod:`.page` renders from the same documents; :mod:`.monitors` (where: :mod:`.locate`) reads
the vGPU monitors' usage that :mod:`.usage` joins into the map.
"""
