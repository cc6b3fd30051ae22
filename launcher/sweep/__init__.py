"""Stage 5, sweep: a grid of runs that never lies, and what it found.

Owns the plan (`plan.py`: every cell composed and validated before the first job, cell ids, repeats
in shuffled rounds, what is already done), the driver the launch sweeper calls (`driver.py`), the
results read back from the runs' summaries (`results.py`), their statistics (`stats.py`: the
two-level bootstrap), each switch pair explained by its first-group wait (`switch.py`), each cell's
losses against the baseline's (`numerics.py`), a tuning sweep's race (`race.py`) and its tuned
recipe (`tuned.py`), and the report (`report.py`, also `launch-report`). It may import every
stage before it (`config`, `preflight`, `estimate`, `run`'s torch-free parts: failure classes, the
wandb logger); it never
imports torch or megatron at module level: a sweep's runs happen in `run`.
"""
