"""Pod annotations and what a container is given: device lists, scheduling policies, the
environment variables HAMi-core reads."""
