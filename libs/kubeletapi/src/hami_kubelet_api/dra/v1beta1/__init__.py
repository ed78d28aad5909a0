"""Generated bindings of the kubelet's DRA API v1beta1 (``k8s.io.kubelet.pkg.apis.dra.v1beta1``)."""
