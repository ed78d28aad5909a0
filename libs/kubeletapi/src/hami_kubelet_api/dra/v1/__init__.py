"""Generated bindings of the kubelet's DRA API v1 (``k8s.io.kubelet.pkg.apis.dra.v1``)."""
