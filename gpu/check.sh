#!/usr/bin/env bash
# The GPU check, one command, on a GPU machine (docs/gpu_check.md). Without --venv (a machine with
# no network whose python3 holds torch), it first installs the wheels gpu/wheels.py prepared
# next to the machine's packages (nothing from a registry, nothing of the machine's replaced);
# then it runs its stages whatever fails (imports, the GPU test tier, the prefetch x CUDA-graph
# sweep of the 1.3B GPT and its report, the prediction, the anchors) and exits 0 only if all
# passed. gpu/check.py says more.
#   gpu/check.sh [--wheels DIR | --venv .venv] [--out DIR] [--work DIR] [--rehearse]
cd "$(dirname "$0")/.." || exit 2
exec python3 gpu/check.py "$@"
