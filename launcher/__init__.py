"""mfsdp-launcher: a Hydra launcher for megatron-core GPT training through Megatron-FSDP.

The folders are the stages, in the order a run passes through them (docs/architecture.md):
`config` (what to run, validated before anything starts) -> `sweep` (a grid's plan, its runs,
results and report) -> `run` (spawning the ranks, and in each rank: build with megatron-core,
train, measure, write) -> `data` (the datasets a rank reads, and `launch-prepare`). `cli.py` is
the thin entry point on top; `files.py` (files written whole) and `notices.py` (the upstream
notices not shown) are the helpers every stage may use.
Imports run one way: `config` imports no other stage, `run` never imports `sweep`, `data` imports
neither, and nothing here imports hydra_plugins (tests/unit/test_layout.py checks it).
"""
