"""Mutating admission webhook service."""
