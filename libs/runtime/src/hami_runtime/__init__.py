"""What every service process shares: flags, logging, reloadable TLS, HTTP sites with health and
metrics endpoints, the event loop, signals and the bounded lifecycle.  One way to do each of
these across the services."""
