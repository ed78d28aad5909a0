"""Stand-ins for the non-NVIDIA vendors' device plugins (see :mod:`.agent`)."""
