"""The device vendors as data: one row per vendor (resource names, keys, request rules)."""
