"""The tuned recipe a tuning sweep writes: SWEEP_DIR/recipe/tuned.yaml, run with
`launch --config-dir SWEEP_DIR +recipe=tuned`.

A recipe delta (`# @package _global_`): the sweep's base recipe in its defaults, then the chosen
cell's overrides (the swept values and what the command line fixed: what was measured), config
groups as defaults overrides. The comments give the evidence: the speedup against the baseline
with its interval, the runs of each cell, the device, the date and megatron-core's version. The
chosen cell is the race's fastest survivor, unless it is within noise of the baseline (or is the
baseline): then the baseline's values are kept, and the recipe says so. A baseline the race
dropped (its throughput interval wholly below the best cell's, its run failed, or its memory
above sweep.memory_limit_gib) is not kept: the race told it apart from the cells left, and the
paired interval over as few as two pairs is not asked again. Unless
sweep.allow_numerics_change, only a cell that trains like the baseline (its losses identical or
close, launcher.sweep.numerics) may be chosen: a faster cell refused for its losses is named in
the recipe and on the console, and the fastest of the others (or the baseline) is kept.
"""

import datetime
import os
from typing import List, Optional

import yaml

from launcher.files import write_text_atomic
from launcher.sweep.numerics import from_row
from launcher.sweep.race import Drop
from launcher import summary as run_summary
from launcher.sweep.folders import attempts
from launcher.sweep.grid import UNMEASURED, bare_key
from launcher.sweep.results import Results, significant
from launcher.sweep.tables import display

# not part of what a run measures: Hydra's own settings, the recipe itself, and UNMEASURED
SKIPPED = ("hydra.", "recipe", *UNMEASURED)


def choose(results: Results) -> tuple:
    """(the chosen row, the fastest surviving row, why): see the module's docstring."""
    race, plan = results.race, results.plan
    measured = [r for r in results.rows
                if r.get("tokens_per_s_per_gpu") is not None and r["status"] == "ok"]
    rows = [r for r in measured if race is None or r["cell"] not in race.dropped]
    if not rows:
        return None, None, "no cell of the race finished ok"
    fastest = max(rows, key=throughput)
    baseline = next((r for r in measured if r["baseline"]), None)
    allowed = [r for r in rows if may_recommend(r, plan.allow_numerics_change)]
    best = max(allowed, key=throughput) if allowed else baseline
    # the cells the gate kept out, in the race or by it (not those it dropped for other reasons)
    gated = [r for r in measured if race is None or r["cell"] not in race.dropped
             or race.dropped[r["cell"]].for_numerics]
    refused = [r for r in gated if not may_recommend(r, plan.allow_numerics_change)
               and (best is None or throughput(r) > throughput(best))]
    said = refusal(refused)
    if best is None:
        return None, fastest, (f"{said}; no cell that trains like the baseline finished ok: fix "
                               "the baseline, or set sweep.allow_numerics_change=true")
    dropped = race.dropped.get(baseline["cell"]) if race and baseline else None
    chosen, why = against_baseline(best, baseline, others=bool(refused), dropped=dropped)
    return chosen, fastest, f"{said}. {why}" if said else why


def throughput(row: dict) -> float:
    return row["tokens_per_s_per_gpu"]


def may_recommend(row: dict, allow_numerics_change: bool) -> bool:
    """Whether the tuner may pick a cell for its losses: it trains like the baseline (identical
    or close, launcher.sweep.numerics), or sweep.allow_numerics_change allows any."""
    numerics = from_row(row)
    return allow_numerics_change or (numerics is not None and numerics.trains_like_baseline)


def refusal(refused: list) -> str:
    """The sentence naming the faster cells refused for their losses ("" for none)."""
    if not refused:
        return ""
    cells = "; ".join(f"{r['label']} ({display(r, 'tokens_per_s_per_gpu')} tokens/s/GPU, losses "
                      f"{display(r, 'numerics')})" for r in refused)
    return (f"Refused for not training like the baseline (sweep.allow_numerics_change=false), "
            f"though faster: {cells}")


def against_baseline(best: dict, baseline: Optional[dict], others: bool,
                     dropped: Optional[Drop] = None) -> tuple:
    """(the chosen row, why): `best` unless it is not significantly faster than the baseline.
    `others`: faster cells were refused, so `best` is the fastest of the others. `dropped`: why
    the race dropped the baseline; it told the two apart, and no second test is asked."""
    fastest = "the fastest of the others" if others else "the fastest cell"
    if best["baseline"]:
        return best, f"The baseline is {fastest}"
    if dropped is not None:
        return best, (f"{fastest.capitalize()}, {best['label']}, is chosen over the baseline, "
                      f"which {dropped.reason} (speedup {display(best, 'speedup')})")
    if baseline is not None and not significant(best):
        why = "one run on a side" if best["step_noise_only"] else "within noise"
        return baseline, (f"{fastest.capitalize()}, {best['label']}, is not significantly faster "
                          f"than the baseline ({why}: speedup {display(best, 'speedup')}): "
                          "the baseline's values are kept")
    return best, f"{fastest.capitalize()}: speedup {display(best, 'speedup')} against the baseline"


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
             "# Runs per cell (tokens/s/GPU median, speedup against the baseline [95% CI], losses "
             "against the baseline's):"]
    for row in results.rows:
        note = row.get("race") if row.get("race", "").startswith(("dropped", "left")) else ""
        lines.append(f"#   {display(row, 'label')}: {row.get('runs_ok', '0')} runs ok, "
                     f"{display(row, 'tokens_per_s_per_gpu')}, {display(row, 'speedup')}, "
                     f"losses {display(row, 'numerics')}"
                     + (f"; {note}" if note else "") if row["status"] != "invalid"
                     else f"#   {row['label']}: invalid ({row['reason']})")
    cell = plan.cell(chosen["cell"])
    defaults, values, inert = ([f"  - {base}"] if base else []), {}, left_out(plan, cell.id)
    for override in cell.overrides:
        key, _, value = override.partition("=")
        key = bare_key(key)
        if key.startswith(SKIPPED):
            continue
        if key in inert:
            lines.append(f"# Left out: {key}={value}, which has no effect with {inert[key]} (the "
                         "sweep fixed it for its other cells; one run refuses it).")
            continue
        if key in groups:
            defaults.append(f"  - override /{key}: {value}")
        else:
            nest(values, key.split("."), yaml.safe_load(value) if value else None)
    lines += ["defaults:", *defaults, "  - _self_"]
    if values:
        lines.append(yaml.safe_dump(values, sort_keys=False).rstrip())
    return "\n".join(lines) + "\n"


def left_out(plan, cell: str) -> dict:
    """Keys the sweep fixed that have no effect in this cell, its swept governor off here
    (cuda_graph.warmup_steps across cuda_graph.impl=none,full_iteration, the none cell chosen),
    each with its governor's value; read from the config an ok run of the cell recorded."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from launcher.config import Config, ConfigError, as_dict
    from launcher.config.effect import inert
    from launcher.config.schema import lookup

    found = [run_summary.read(d) for r in range(plan.repeats) for d in attempts(plan.sweep_dir,
                                                                                cell, r)]
    configs = [s.config for s in found if getattr(s, "status", None) == "ok" and s.config]
    if not configs:
        return {}
    try:
        cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config), configs[0]))
    except (ConfigError, OmegaConfBaseException):  # a summary of another version's schema
        return {}
    values = as_dict(cfg)
    return {key: f"{rule.governor}={lookup(values, rule.governor)}" for key, rule in inert(cfg)}


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
