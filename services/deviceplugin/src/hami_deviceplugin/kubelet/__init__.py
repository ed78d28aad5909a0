"""The kubelet side: the unix-socket gRPC server that runs a plugin's service, what every plugin
servicer shares, and the link that keeps each plugin registered."""
