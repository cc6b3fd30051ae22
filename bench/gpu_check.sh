#!/usr/bin/env bash
# The GPU check, one command, for a machine with an NVIDIA GPU, Python 3.12 and torch, and no
# network: installs this project and its dependencies from the wheels bench/gpu_wheels.sh
# prepared (nothing from a registry; the machine's torch is kept), then runs its stages whatever
# fails (imports, the GPU test tier, a shrunk prefetch x CUDA-graph sweep of the 1.3B GPT, the
# report) and exits 0 only if all passed. bench/gpu_check.py says more.
#   bench/gpu_check.sh [--wheels DIR] [--rehearse]
cd "$(dirname "$0")/.." || exit 2
exec python3.12 bench/gpu_check.py "$@"
