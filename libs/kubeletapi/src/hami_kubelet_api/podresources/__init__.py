"""The kubelet's pod-resources API (``/var/lib/kubelet/pod-resources/kubelet.sock``)."""
