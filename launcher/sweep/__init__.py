"""Stage 5, sweep: a grid of runs that never lies, and what it found.

Owns the sweep's own settings, checked before any cell (`settings.py`: the sweep section, its
folder, the launcher), the grid (`grid.py`: the swept values expanded, every cell composed and
validated before the first job, cell ids), the plan (`plan.py`: the cells, the baseline,
plan.json), the run folders' layout (`folders.py`: `<cell>/repeat<r>/attempt<n>`, the only module
that spells it), what runs next (`schedule.py`: repeats in shuffled rounds, what is already done),
the driver the launch sweeper calls (`driver.py`) and the error of a sweep refused as a whole
(`error.py`), everything the sweep prints (`console.py`) and its display names (`names.py`), the
results read back from the runs' summaries (`results.py`) and their tables' text (`tables.py`:
results.csv, results.md), their statistics (`stats.py`: the two-level bootstrap), each switch pair
explained by its first-group wait (`switch.py`), each cell's losses against the baseline's
(`numerics.py`), a tuning sweep's race (`race.py`) and its tuned recipe (`tuned.py`), the Slurm
launcher's checks and submission (`slurm.py`, `submit.py`), and the report (`report.py`, also
`launch-report`; its charts in `charts.py`, its page in `page.py`). It may import every stage
before it (`config`, `preflight`, `estimate`, `run`'s torch-free parts: failure classes, the wandb
logger); it never imports torch or megatron at module level: a sweep's runs happen in `run`.
"""
