"""Device plugin service."""
