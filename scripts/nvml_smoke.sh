#!/usr/bin/env bash
# Exercise the device plugin's nvml backend on a machine with NVIDIA GPUs and a driver.
#
#   scripts/nvml_smoke.sh                      # discover, print GPUs, usage, replicas, register JSON
#   scripts/nvml_smoke.sh --watch 30           # then print NVML health changes for 30 s
#   scripts/nvml_smoke.sh --device-split-count 4 --device-memory-scaling 1.5
#   HAMI_SMOKE_MIG_CREATE=1 scripts/nvml_smoke.sh   # also create + destroy one 1g MIG instance on
#                                               # an idle GPU already in MIG mode (never changes
#                                               # the MIG mode itself)
#
# MIG-capable GPUs also print {"kind": "mig"} (mode, busy, profiles with their placements,
# instances) and {"kind": "mig_register"} (what a node with operatingmode mig would register).
# Output is one JSON object per line ({"kind": gpu|usage|replicas|register|mig|mig_register|mig_create|health|error, ...}).
# Exit status: 0 GPUs found, 1 NVML works but no GPU, 2 NVML cannot start. No cluster is touched.
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v uv >/dev/null 2>&1; then
    exec uv run --frozen python -m hami_deviceplugin.gpu.nvml_smoke "$@"
fi
exec python3 -m hami_deviceplugin.gpu.nvml_smoke "$@"
