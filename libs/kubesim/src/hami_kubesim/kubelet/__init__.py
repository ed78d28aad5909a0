"""The kubelet stand-in: device-plugin registration, the device manager, pod admission and the
status it writes back."""
