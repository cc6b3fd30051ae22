"""A sweep's results: one row per cell, read from plan.json and each run's summary.json, and the
numbers over them (throughput intervals, speedups, the throughput-memory front).

Works on a finished sweep and on one that was interrupted (cells never started are `pending`,
runs started without a summary are `interrupted`). Their text (results.csv, results.md, each
column as the tables show it) is launcher.sweep.tables.
"""

import os
import platform
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from launcher.summary import RunSummary, read as read_summary
from launcher.sweep import stats
from launcher.sweep.folders import attempts
from launcher.sweep.numerics import Defect, add_numerics, switch_defects
from launcher.sweep.plan import Cell, Plan
from launcher.sweep.race import Race, replay
from launcher.sweep.switch import add_explanations, first_group_metrics


MIB = 2**20


COLUMNS = (
    "cell", "label", "status", "baseline", "runs_ok", "tokens_per_s_per_gpu",
    "tokens_per_s_per_gpu_ci_low", "tokens_per_s_per_gpu_ci_high", "speedup", "speedup_ci_low",
    "speedup_ci_high", "speedup_pairs", "within_noise", "step_noise_only", "tflops_per_gpu",
    "mfu", "step_time_ms_p50", "step_time_ms_p90", "peak_allocated_mib", "peak_reserved_mib", "peak_rss_mib",
    "peak_memory_mib", "pareto", "cuda_graph_captured", "first_group_prefetches", "first_group_issued_in", "first_group_bytes",
    "first_group_allgather_ms", "first_group_wait_ms", "first_group_wait_share",
    "switch_partner", "predicted_saving_ms", "measured_saving_ms", "measured_saving_ms_ci_low",
    "measured_saving_ms_ci_high", "measured_saving_within_noise",
    "measured_saving_step_noise_only", "profile_trace",
    "profile_step_ms", "profile_forward_backward_ms", "profile_optimizer_ms",
    "profile_first_group_wait_ms", "final_loss", "numerics", "numerics_max_rel_diff",
    "numerics_note", "reason", "log_excerpt", "run_dirs",
)


@dataclass
class Results:
    plan: Plan
    rows: List[dict]
    step_times_ms: Dict[str, List[float]] = field(default_factory=dict)
    """Per cell id: every steady-state step time of its ok runs, pooled (for the distributions)."""
    environment: dict = field(default_factory=dict)
    race: Optional[Race] = None
    """A tuning sweep's race, replayed from disk (launcher.sweep.race); None otherwise."""
    defects: List[Defect] = field(default_factory=list)
    """Switch pairs whose losses are not identical (launcher.sweep.numerics)."""
    memory_noise_mib: float = 0.0
    """How far peak memory moves without the cell changing (memory_noise_mib): the front's
    tolerance, and the report's."""

    @property
    def memory_within_noise(self) -> bool:
        """Every measured cell's peak memory within memory_noise_mib of every other's (two cells
        or more): no cell saves memory, and a chart against memory has no trade-off to show."""
        peaks = [r["peak_memory_mib"] for r in self.rows
                 if r.get("tokens_per_s_per_gpu") is not None]
        return len(peaks) > 1 and max(peaks) - min(peaks) <= self.memory_noise_mib

    @property
    def columns(self) -> List[str]:
        return [COLUMNS[0], COLUMNS[1], *self.plan.keys, *COLUMNS[2:]]


def repeat_run(plan: Plan, cell: Cell, repeat: int) -> tuple:
    """(status, summary or None, run dir or None) of one repeat: its ok attempt, else the newest."""
    tried = attempts(plan.sweep_dir, cell.id, repeat)
    if not tried:
        return "pending", None, None
    summaries = [(d, read_summary(d)) for d in tried]
    ok = [(d, s) for d, s in summaries if s and s.status == "ok"]
    folder, summary = ok[0] if ok else summaries[-1]
    return (summary.status if summary else "interrupted"), summary, folder


def cell_status(statuses: List[str]) -> str:
    """ok only if every repeat is; else the first failure; else pending or interrupted."""
    failed = [s for s in statuses if s not in ("ok", "pending", "interrupted")]
    if failed:
        return failed[0]
    for waiting in ("interrupted", "pending"):
        if waiting in statuses:
            return waiting
    return "ok"


def collect(plan: Plan) -> Results:
    results = Results(plan, [], race=replay(plan) if plan.tune else None)
    repeat_runs, repeats, peaks = {}, {}, {}
    for cell in plan.cells:
        row = {"cell": cell.id, "label": cell.label, **cell.values,
               "baseline": cell.id == plan.baseline, "reason": cell.reason}
        results.rows.append(row)
        if not cell.valid:
            row["status"] = "invalid"
            continue
        rounds = results.race.rounds_of(cell.id, plan.repeats) if results.race else plan.repeats
        runs = [repeat_run(plan, cell, r) for r in range(rounds)]
        repeats[cell.id] = [(status, summary) for status, summary, _ in runs]
        row["status"] = cell_status([status for status, _, _ in runs])
        row["run_dirs"] = " ".join(d for _, _, d in runs if d)
        ok = [s for status, s, _ in runs if status == "ok"]
        row["runs_ok"] = f"{len(ok)}/{rounds}"
        if results.race:
            row["race"] = race_note(results.race, cell.id)
        failed = next((s for status, s, _ in runs if s and status != "ok"), None)
        if failed:
            row["reason"] = failed.message
            row["log_excerpt"] = failed.log_excerpt
        row.update(profile_columns(runs, plan.sweep_dir))
        if ok:
            row.update(cell_metrics(ok, [np.asarray(s.throughput_samples()) for s in ok]))
            repeat_runs[cell.id] = ok_repeat_runs(runs)
            peaks[cell.id] = [s.peak_memory_bytes / MIB for s in ok]
            results.step_times_ms[cell.id] = [1e3 * t for s in ok
                                              for t in s.steady_state_step_times_s]
            results.environment = results.environment or environment(ok[0])
    add_speedups(results.rows, repeat_runs, plan.baseline)
    results.memory_noise_mib = memory_noise_mib(peaks)
    mark_pareto(results.rows, results.memory_noise_mib)
    add_explanations(results.rows, plan.keys, repeat_runs)
    add_numerics(results.rows, repeats, plan.baseline)
    results.defects = switch_defects(results.rows, plan.keys, repeats)
    return results


def ok_repeat_runs(runs: list) -> List[stats.RepeatRun]:
    """A cell's ok runs, each with its repeat: what a comparison pairs by (stats.compare)."""
    return [stats.RepeatRun(repeat, summary.tokens_per_step / summary.world_size,
                            summary.steady_state_step_times_s)
            for repeat, (status, summary, _) in enumerate(runs) if status == "ok"]


def profile_columns(runs: list, sweep_dir: str) -> dict:
    """The cell's profiled run (a profiling sweep profiles its first repeat): rank 0's trace,
    relative to the sweep directory, and the medians of its window's parts (launcher.run.profile)."""
    for status, summary, folder in runs:
        profile = summary.profile if status == "ok" else None
        if profile and profile.files:
            parts = profile.breakdown_ms or {}
            trace = next((f for f in profile.files if f.endswith(".json.gz")), profile.files[0])
            return {"profile_trace": os.path.relpath(os.path.join(folder, trace), sweep_dir),
                    **{f"profile_{k.replace('.', '_')}_ms": v for k, v in parts.items()}}
    return {}


def race_note(race: Race, cell_id: str) -> str:
    """A cell's place in a tuning sweep's race, as its row shows it."""
    if cell_id in race.dropped:
        return race.dropped[cell_id].reason
    return f"kept to the end ({race.ended})" if race.ended else "racing"


def cell_metrics(ok: List[RunSummary], samples: List[np.ndarray]) -> dict:
    first = ok[0]
    tps, low, high = stats.median_ci(samples)
    seconds = np.asarray([t for s in ok for t in s.steady_state_step_times_s])
    # the median of the per-step rates, as a run's summary has it (launcher.run.step_stats.median_per_step)
    tflops = float(np.median(first.flops_per_step / seconds / first.world_size / 1e12))
    peak = first.peak_flops
    return {
        "tokens_per_s_per_gpu": tps, "tokens_per_s_per_gpu_ci_low": low,
        "tokens_per_s_per_gpu_ci_high": high, "tflops_per_gpu": tflops,
        "mfu": tflops * 1e12 / peak if peak else None,
        "step_time_ms_p50": 1e3 * float(np.percentile(seconds, 50)),
        "step_time_ms_p90": 1e3 * float(np.percentile(seconds, 90)),
        **{f"peak_{name}_mib": peak_mib(ok, f"peak_{key}_bytes")
           for name, key in (("allocated", "memory_allocated"), ("reserved", "memory_reserved"),
                             ("rss", "rss"))},
        "peak_memory_mib": max(s.peak_memory_bytes for s in ok) / MIB,
        "cuda_graph_captured": all(s.metrics.cuda_graph_captured for s in ok),
        "cuda_graph_impl": first.config["cuda_graph"]["impl"],
        "first_group_prefetches": first.metrics.first_group_prefetches,
        **first_group_metrics(ok),
        "final_loss": float(np.median([s.metrics.final_loss for s in ok])),
    }


def peak_mib(ok: List[RunSummary], key: str) -> Optional[float]:
    """The largest of the runs' peaks in MiB; None where they measured none (a CPU has no CUDA
    allocator)."""
    values = [getattr(s.metrics, key) for s in ok if getattr(s.metrics, key) is not None]
    return max(values) / MIB if values else None


MEMORY_NOISE_FLOOR = 0.01
"""A difference in peak memory below this share of it is not one to choose a cell by."""


def memory_noise_mib(peaks: Dict[str, List[float]]) -> float:
    """How far a cell's peak memory (MiB) moves without the cell changing: the largest spread
    (max - min) over one cell's ok runs, and at least MEMORY_NOISE_FLOOR of the cells' median
    peak. A CPU's max RSS moves by tens of MiB between identical runs (a profiled repeat holds
    the profiler's buffers); a GPU's reserved peak is often the same to the byte, where the
    floor keeps a 0.2% difference from reading as a trade-off."""
    measured = [p for p in peaks.values() if p]
    if not measured:
        return 0.0
    spread = max(max(p) - min(p) for p in measured)
    return max(spread, MEMORY_NOISE_FLOOR * float(np.median([max(p) for p in measured])))


def mark_pareto(rows: List[dict], memory_noise: float = 0.0) -> None:
    """`pareto` on each measured row: whether no other cell beats it beyond noise, i.e. is
    clearly better on one of throughput and peak memory and not clearly worse on the other (the
    throughput-memory front). Clearly faster: its tokens/s/GPU interval lies wholly above (the
    95% intervals the chart draws do not overlap); clearly less memory: lower by more than
    `memory_noise` MiB (memory_noise_mib). A difference within noise is a tie: cells whose peak
    memory is the same within noise are ranked by throughput alone, and cells whose intervals
    overlap are not told apart, so that a 0.2% memory difference does not make a slower cell
    part of the front."""
    measured = [r for r in rows if r.get("tokens_per_s_per_gpu") is not None]

    def faster(a: dict, b: dict) -> bool:
        return a["tokens_per_s_per_gpu_ci_low"] > b["tokens_per_s_per_gpu_ci_high"]

    def leaner(a: dict, b: dict) -> bool:
        return a["peak_memory_mib"] < b["peak_memory_mib"] - memory_noise

    for row in measured:
        row["pareto"] = not any(
            (faster(o, row) and not leaner(row, o)) or (leaner(o, row) and not faster(row, o))
            for o in measured if o is not row)


def add_speedups(rows: List[dict], repeat_runs: Dict[str, List[stats.RepeatRun]],
                 baseline: Optional[str]) -> None:
    """Each measured cell's speedup against the baseline, paired by repeat (stats.compare), with
    its interval; `step_noise_only` where the two share fewer than stats.MIN_REPEATS ok repeats.
    The baseline is not compared with itself."""
    if baseline not in repeat_runs:
        return  # the baseline has no ok run (yet): no speedups
    for row in rows:
        if row["cell"] in repeat_runs and row["cell"] != baseline:
            found = stats.compare(repeat_runs[row["cell"]], repeat_runs[baseline])
            if found is not None:
                row.update(comparison_columns(found))


def comparison_columns(found: stats.Comparison) -> dict:
    """A speedup's columns in a row, from its comparison."""
    return {"speedup": found.ratio, "speedup_ci_low": found.low, "speedup_ci_high": found.high,
            "speedup_pairs": found.num_pairs, "within_noise": found.within_noise,
            "step_noise_only": found.step_noise_only}


def significant(row: dict) -> bool:
    """A speedup that counts: its interval excludes 1.0 and it rests on two pairs of runs or
    more."""
    return row.get("speedup") is not None and not row["within_noise"] \
        and not row["step_noise_only"]


def environment(summary: RunSummary) -> dict:
    return {"device": summary.device, "world_size": summary.world_size,
            "backend": summary.backend, "megatron_core_version": summary.megatron_core_version,
            "torch_version": summary.torch_version, "python": platform.python_version(),
            "precision": summary.config["train"]["precision"]}
