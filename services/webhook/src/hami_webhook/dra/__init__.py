"""NVIDIA requests as DRA claims (``--dra-claims``, ``/webhook/dra``; docs/dra.md).

``claims`` (pure) converts a pod's NVIDIA requests into claims from hash-named
ResourceClaimTemplates; ``template_writer`` (API I/O) creates those templates before the reply.
"""
