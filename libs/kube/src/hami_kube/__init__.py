"""Shared Kubernetes I/O for the services."""
