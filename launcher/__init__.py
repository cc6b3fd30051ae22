"""mfsdp-launcher: a Hydra launcher for megatron-core GPT training through Megatron-FSDP.

The folders are the stages, in the order a run passes through them (docs/architecture.md):
`config` (what to run, typed and validated) -> `preflight` (everything decided before any rank:
the one pre-flight, the world, what this installation can build) -> `estimate` (the dry run's
memory, FLOPs and time model) -> `run` (starting the ranks, and in each rank: build with
megatron-core, train, measure, write) -> `sweep` (a grid's plan, its runs, results and report).
`data` holds the datasets a rank reads and `launch-prepare`. `cli.py` is the thin entry point on
top, `hf_cli.py` the `launch-hf` one (Hugging Face models in and out); `files.py` (files written whole), `notices.py` (the upstream notices not shown) and
`summary.py` (a run's summary.json) are the helpers every stage may use.
Imports run one way, down that order: no stage imports one after it, `preflight` and `estimate`
import no torch, and nothing here imports hydra_plugins (tests/unit/test_layout.py checks it).
"""
