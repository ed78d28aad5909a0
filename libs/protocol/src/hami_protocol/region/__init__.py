"""HAMi-core's shared region: the per-container ``<uuid4>.cache`` file in which the in-container
limiter (``libvgpu.so``) publishes its devices, limits and per-process usage, and into which the
vGPU monitor writes its priority feedback.  :mod:`.layout` pins the two binary layouts (v0, v1)
and tells them apart, :mod:`.codec` decodes and encodes whole regions, :mod:`.usage` is the
monitor's fast per-device read, and :mod:`.feedback` decides the feedback writes.  Everything here
works on in-memory buffers; mapping the files is the caller's business.
"""
