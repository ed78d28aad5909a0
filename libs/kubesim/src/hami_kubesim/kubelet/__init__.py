"""The kubelet stand-in (``standin``, run as its ``settings`` say): device-plugin registration,
the device manager, the pod manager and pod-resources API, pod admission (order and pace), the
status it writes back (built in ``status``, sent by ``statusmanager``) and the containers'
HAMi-core shared regions (``workloads``), the DRA host side (``dra``: plugin watcher, claim
prepare/unprepare, CDI edits); ``testing`` holds a fake device plugin and helpers for its tests."""
