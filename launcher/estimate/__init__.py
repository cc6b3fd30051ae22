"""Stage 3, estimate: the dry run's arithmetic, before any rank starts. No torch.

Owns the parameters and memory per GPU (`memory.py`: `runtime.dry_run=true`'s lines), Megatron-LM's
model FLOPs and the rates made of them (`flops.py`, which a rank's record uses too), Megatron-FSDP's
parameter groups (`param_groups.py`) and default communication unit (`communication_unit.py`),
the time model on a named cluster (`predict.py`, with `kernels.py`: a GPU layer by kernel class,
and `topology.py`: NVLink domains, NICs and collectives), whether the memory fits and the
cheapest change that does (`fit.py`), and the prediction's text (`prediction_text.py`).
It may import `config` and `preflight`; never `run` or `sweep`.
Nothing here imports torch or megatron (tests/unit/test_layout.py).
"""
