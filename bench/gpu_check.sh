#!/usr/bin/env bash
# The GPU check, one command, for a machine with NVIDIA GPUs, Python 3.12 and torch installed,
# and no network. Installs this project and its dependencies from wheels prepared beforehand by
# bench/gpu_wheels.sh (nothing from a registry; torch is left as the machine has it), runs the
# GPU test tier, then a prefetch x CUDA-graph sweep of a 1.3B GPT (bf16, local layer spec) with
# 3 repeats, and writes its report.
#   bench/gpu_check.sh [WHEEL_DIR]      (default: .whl)
# Not yet run on a GPU machine: no session of this project has had one so far.
set -euo pipefail
cd "$(dirname "$0")/.."
wheels=${1:-.whl}
venv=.venv-gpu
python3.12 -m venv --system-site-packages "$venv"  # the machine's torch, not a second one
"$venv/bin/pip" install --quiet --no-index --no-deps "$wheels"/*.whl
"$venv/bin/python" -c "import torch, megatron.core; assert torch.cuda.is_available()"
export WANDB_MODE=offline WANDB_SILENT=true
timeout 240 "$venv/bin/python" -m pytest -q tests/gpu
sweep_dir=sweeps/gpu_check_$(date +%Y%m%d_%H%M%S)
timeout 300 "$venv/bin/launch" -m +recipe=gpt_1p3b_1gpu_bf16 \
  fsdp.prefetch_first_param_group=true,false cuda_graph.impl=none,full_iteration \
  sweep.repeats=3 hydra.sweep.dir="$sweep_dir" || true  # a failed cell is in the report
cat "$sweep_dir/results.md"
echo "report: $sweep_dir/report.html"
