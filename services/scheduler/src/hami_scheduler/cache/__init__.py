"""The scheduler's caches and the watches that feed them: nodes, pods, NICs and quotas."""
