"""GPU backends: ``base`` (the interface and what a backend reports), ``nvml`` (real GPUs through
nvidia-ml-py) and ``fake`` (the ``gpus`` of the fake devices file)."""
