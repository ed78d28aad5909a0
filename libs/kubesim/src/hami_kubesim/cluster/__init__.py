"""A simulated cluster from a YAML file: the API server plus the configured stand-ins, and the
``hami-kubesim serve`` / ``cluster`` commands."""
