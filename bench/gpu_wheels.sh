#!/usr/bin/env bash
# Prepares, on a machine with a package registry and this project's .venv (`make test` made it),
# the wheels bench/gpu_check.sh installs on a GPU machine without network: every package of the
# .venv at its exact version, except torch and the CUDA libraries the GPU machine already has.
#   bench/gpu_wheels.sh [WHEEL_DIR]     (default: .whl, which git ignores)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.whl}
mkdir -p "$out"
pins=$(mktemp)
.venv/bin/pip freeze --exclude-editable \
  | grep -v -i -E '^(torch|triton|nvidia-|cuda-)' > "$pins"
# Linux x86_64, Python 3.12 wheels; a package published only as source is built into one here.
.venv/bin/pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform linux_x86_64 \
  --platform any --dest "$out" -r "$pins" 2> "$pins.err" || true
for spec in $(cat "$pins"); do
  name=${spec%%==*}
  norm=$(echo "$name" | tr '[:upper:]-' '[:lower:]_')
  ls "$out" | tr '[:upper:]-' '[:lower:]_' | grep -q "^${norm}-" \
    || .venv/bin/pip wheel --quiet --no-deps --wheel-dir "$out" "$spec"
done
.venv/bin/pip wheel --quiet --no-deps --wheel-dir "$out" .
echo "$(ls "$out" | wc -l) wheels in $out; copy it with the checkout to the GPU machine"
