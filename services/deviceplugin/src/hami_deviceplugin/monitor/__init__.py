"""The vGPU monitor (``hami-vgpu-monitor``), HAMi's ``vgpu-monitor`` beside the device plugin:
per-container GPU usage read from HAMi-core's shared regions
(``$HOOK_PATH/containers/<podUID>_<container>/<uuid>.cache``), exported under HAMi's metric
names, and HAMi's priority feedback written back into the regions.

Layout:

* ``__main__`` (process entry), ``cli_flags`` and ``settings``; ``app`` (the wiring and the one
  lifecycle);
* ``discovery`` (pure: which directories and files hold regions), ``region_file`` (one region
  file: read with ``pread``, written through a mapping), ``regions`` (the node's region files:
  passes, reads, feedback writes, clean-up),
  ``problems`` (bad input counted once per occurrence, logged once), ``pods`` (the pod watch);
* ``scan`` (the pass loop and the host GPUs), ``host`` (HAMi's host GPU gauges, which only the
  monitor exports), ``series`` (HAMi's per-container families), ``metrics`` (rendered at each
  scrape in a worker thread, never on the event loop).

The codec of the regions is :mod:`hami_protocol.region`; the ``zone`` label and the host label
set are shared with the device plugin (:mod:`hami_deviceplugin.metric_labels`), and so are the
GPU backends.  Nothing here imports the device plugin's gRPC or kubelet parts.
"""
