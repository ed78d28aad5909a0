"""The kubelet side: the unix-socket gRPC server, what every plugin servicer shares, and the
link that keeps each plugin registered."""
