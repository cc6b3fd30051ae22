"""What a sweep runs next, from what is on disk: rounds of (cell, repeat, attempt), each round
every valid cell once in a shuffled order; a repeat that already has an ok run is skipped, any
other gets a new attempt folder (launcher.sweep.folders)."""

import random
from typing import List

from launcher import summary as run_summary
from launcher.sweep.folders import attempt_number, attempts
from launcher.sweep.plan import Plan


def next_attempt(sweep_dir: str, cell: str, repeat: int) -> int:
    """One past the newest attempt: an earlier attempt's files are never overwritten."""
    done = attempts(sweep_dir, cell, repeat)
    return attempt_number(done[-1]) + 1 if done else 0


def has_ok_run(sweep_dir: str, cell: str, repeat: int) -> bool:
    return any(getattr(run_summary.read(d), "status", None) == "ok"
               for d in attempts(sweep_dir, cell, repeat))


def schedule(plan: Plan) -> List[List[tuple]]:
    """Rounds of (cell, repeat, attempt) still to run: each round every valid cell once, in an
    order shuffled with the seed and the round, so drift on a shared machine spreads over cells.
    A repeat that already has an ok run is skipped; any other gets a new attempt directory."""
    rounds = []
    for repeat in range(plan.repeats):
        order = [c for c in plan.cells if c.valid]
        random.Random(f"{plan.seed}:{repeat}").shuffle(order)
        todo = []
        for cell in order:
            if not has_ok_run(plan.sweep_dir, cell.id, repeat):
                todo.append((cell, repeat, next_attempt(plan.sweep_dir, cell.id, repeat)))
        rounds.append(todo)
    return rounds
