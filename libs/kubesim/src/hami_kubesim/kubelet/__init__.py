"""The kubelet stand-in: device-plugin registration, the device manager, the pod manager and
pod-resources API, pod admission (order and pace) and the status it writes back; ``testing``
holds a fake device plugin and helpers for its tests."""
