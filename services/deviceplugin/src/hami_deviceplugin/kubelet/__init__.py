"""The kubelet side: the unix-socket gRPC server that runs a plugin's service, what every plugin
servicer shares, the link that keeps each plugin registered, and the client of the kubelet's
pod-resources API."""
