"""The node agent as a DRA kubelet plugin (``--mode=dra``): ResourceSlice publishing, the
kubelet's plugin registration and ``DRAPlugin`` services, claim preparation with CDI spec files
carrying HAMi-core's env and mounts, and the checkpoint that makes it survive restarts.

docs/dra.md describes the whole; each module's docstring its part.
"""
