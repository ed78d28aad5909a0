"""Configuration documents: ``device-config.yaml`` (with the chart's defaults and the vendor
sections) and the device plugin's per-node ``config.json``."""
