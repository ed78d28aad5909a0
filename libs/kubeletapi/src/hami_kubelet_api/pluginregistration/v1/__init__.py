"""Generated bindings of the kubelet's ``pluginregistration`` v1 API."""
