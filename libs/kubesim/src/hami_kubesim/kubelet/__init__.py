"""The kubelet stand-in (``standin``, run as its ``settings`` say): the device-plugin side
(``deviceplugins``: registration, device lists, the device manager), the pod side (``pods``: pod
lifecycle, admission order and pace, the pod worker, the pod manager, status writes, the
containers' HAMi-core shared regions), the node status it keeps current (``nodestatus``), the
pod-resources API (``podresources``), the records and status bodies it writes (``status``) and
the DRA host side (``dra``: plugin watcher, claim prepare/unprepare, CDI edits); ``testing``
holds a fake device plugin and helpers for its tests."""
