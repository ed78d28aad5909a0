"""The kubelet's plugin-registration API (the plugin watcher on ``plugins_registry/``)."""
