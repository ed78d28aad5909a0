"""What every service process shares: logging setup, HTTP sites, health and metrics endpoints,
reloadable TLS, and signal-driven shutdown.  One way to do each of these across the services."""
