"""In-memory Kubernetes API server and control-plane stand-ins."""
