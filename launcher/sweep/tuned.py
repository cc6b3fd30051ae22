"""The tuned recipe a tuning sweep writes: SWEEP_DIR/recipe/tuned.yaml, run with
`launch --config-dir SWEEP_DIR +recipe=tuned`.

A recipe delta (`# @package _global_`): the sweep's base recipe in its defaults, then the chosen
cell's overrides (the swept values and what the command line fixed: what was measured), config
groups as defaults overrides. The comments give the evidence: the speedup against the baseline
with its interval, the runs of each cell, the device, the date and megatron-core's version. The
chosen cell is the race's fastest survivor, unless it is within noise of the baseline (or is the
baseline): then the baseline's values are kept, and the recipe says so.
"""

import datetime
import os
from typing import List, Optional

import yaml

from launcher.files import write_text_atomic
from launcher.sweep.plan import UNMEASURED, bare_key
from launcher.sweep.results import Results, display, significant

# not part of what a run measures: Hydra's own settings, the recipe itself, and UNMEASURED
SKIPPED = ("hydra.", "recipe", *UNMEASURED)


def choose(results: Results) -> tuple:
    """(the chosen row, the fastest surviving row, why): see the module's docstring."""
    race = results.race
    rows = [r for r in results.rows if r.get("tokens_per_s_per_gpu") is not None
            and r["status"] == "ok" and (race is None or r["cell"] not in race.dropped)]
    if not rows:
        return None, None, "no cell of the race finished ok"
    best = max(rows, key=lambda r: r["tokens_per_s_per_gpu"])
    baseline = next((r for r in results.rows if r["baseline"]), None)
    if best["baseline"]:
        return best, best, "The baseline is the fastest cell"
    if baseline is not None and baseline["status"] == "ok" and not significant(best):
        why = "one run on a side" if best["step_noise_only"] else "within noise"
        return baseline, best, (f"The fastest cell, {best['label']}, is not significantly faster "
                                f"than the baseline ({why}: speedup {display(best, 'speedup')}): "
                                "the baseline's values are kept")
    return best, best, f"The fastest cell: speedup {display(best, 'speedup')} against the baseline"


def recipe_text(results: Results, base: Optional[str], groups: List[str]) -> Optional[str]:
    chosen, best, why = choose(results)
    if chosen is None:
        return None
    plan, env = results.plan, results.environment
    lines = ["# @package _global_",
             f"# Tuned by sweep {plan.name} on {datetime.date.today().isoformat()}: "
             f"{env.get('device')} x{env.get('world_size')}, megatron-core "
             f"{env.get('megatron_core_version')}, torch {env.get('torch_version')}.",
             f"# Chosen: {chosen['label']}. {why}.",
             f"# The race: {results.race.ended if results.race else 'every repeat ran'}.",
             *([f"# Memory limit: sweep.memory_limit_gib={plan.memory_limit_gib:g} (peak "
                "reserved on a GPU, max RSS on a CPU); cells above it left the race."]
               if plan.memory_limit_gib is not None else []),
             "# Runs per cell (tokens/s/GPU median, speedup against the baseline [95% CI]):"]
    for row in results.rows:
        note = row.get("race") if row.get("race", "").startswith(("dropped", "left")) else ""
        lines.append(f"#   {display(row, 'label')}: {row.get('runs_ok', '0')} runs ok, "
                     f"{display(row, 'tokens_per_s_per_gpu')}, {display(row, 'speedup')}"
                     + (f"; {note}" if note else "") if row["status"] != "invalid"
                     else f"#   {row['label']}: invalid ({row['reason']})")
    cell = plan.cell(chosen["cell"])
    defaults, values = ([f"  - {base}"] if base else []), {}
    for override in cell.overrides:
        key, _, value = override.partition("=")
        key = bare_key(key)
        if key.startswith(SKIPPED):
            continue
        if key in groups:
            defaults.append(f"  - override /{key}: {value}")
        else:
            nest(values, key.split("."), yaml.safe_load(value) if value else None)
    lines += ["defaults:", *defaults, "  - _self_"]
    if values:
        lines.append(yaml.safe_dump(values, sort_keys=False).rstrip())
    return "\n".join(lines) + "\n"


def nest(tree: dict, path: List[str], value) -> None:
    for part in path[:-1]:
        tree = tree.setdefault(part, {})
    tree[path[-1]] = value


def write(results: Results, base: Optional[str], groups: List[str]) -> Optional[str]:
    """Writes SWEEP_DIR/recipe/tuned.yaml; returns its path (None: nothing to choose from)."""
    text = recipe_text(results, base, groups)
    if text is None:
        return None
    path = os.path.join(results.plan.sweep_dir, "recipe", "tuned.yaml")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_text_atomic(path, text)
    return path
