#!/usr/bin/env bash
# Exercise the device plugin's nvml backend on a machine with NVIDIA GPUs and a driver.
#
#   scripts/nvml_smoke.sh                      # discover, print GPUs, usage, replicas, register JSON
#   scripts/nvml_smoke.sh --watch 30           # then print NVML health changes for 30 s
#   scripts/nvml_smoke.sh --device-split-count 4 --device-memory-scaling 1.5
#
# Output is one JSON object per line ({"kind": gpu|usage|replicas|register|health|error, ...}).
# Exit status: 0 GPUs found, 1 NVML works but no GPU, 2 NVML cannot start. No cluster is touched.
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v uv >/dev/null 2>&1; then
    exec uv run --frozen python -m hami_deviceplugin.gpu.nvml_smoke "$@"
fi
exec python3 -m hami_deviceplugin.gpu.nvml_smoke "$@"
