"""GPU backends: ``base`` (the interface and what a backend reports), ``nvml`` (real GPUs through
nvidia-ml-py), ``fake`` (the ``gpus`` of the fake devices file) and ``choice`` (the one a
process's ``--device-backend`` names)."""
