#!/usr/bin/env bash
# The GPU check, one command, on the lent GPU machine (no network; its python3 holds torch):
# installs the wheels bench/gpu_wheels.py prepared next to the machine's packages (nothing from a
# registry, nothing of the machine's replaced), then runs its stages whatever fails (imports, the
# GPU test tier, the prefetch x CUDA-graph sweep of the 1.3B GPT and its report, the anchors) and
# exits 0 only if all passed. bench/gpu_check.py says more.
#   bench/gpu_check.sh [--wheels DIR] [--out DIR] [--rehearse]
cd "$(dirname "$0")/.." || exit 2
exec python3 bench/gpu_check.py "$@"
