"""The kubelet stand-in: device-plugin registration, the device manager, the pod manager and
pod-resources API, pod admission (order and pace), the status it writes back and the containers'
HAMi-core shared regions (``workloads``); ``testing`` holds a fake device plugin and helpers for
its tests."""
