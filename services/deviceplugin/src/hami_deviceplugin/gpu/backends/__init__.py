"""GPU backends: ``nvml`` (real GPUs through nvidia-ml-py) and ``fake`` (a YAML file)."""
