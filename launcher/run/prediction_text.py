"""The dry run's prediction as text: the `[predict]` lines of `runtime.dry_run=true` with
`cluster.gpu` set, and a sweep plan's predicted column (the model: launcher/run/predict.py)."""

from dataclasses import replace
from typing import List, Optional

from launcher.config import Config, World
from launcher.run.fit import fit
from launcher.run.predict import Unit, cluster_of, predict


def short(cfg: Config, world: Optional[World] = None) -> str:
    """A sweep plan's predicted column, for the cell's world (its pre-flight's)."""
    cluster = cluster_of(cfg, world)
    p, verdict = predict(cfg, cluster), fit(cfg, cluster)
    memory = (f"{verdict.memory_gib:.0f} GiB" if verdict.fits else
              f"DOES NOT FIT: {verdict.memory_gib:.0f} GiB of {verdict.capacity_gib:g}"
              + (f", fits with {verdict.change.overrides}" if verdict.change else ""))
    return (f"{p.timeline.step_s:.3g} s/step, {p.tokens_per_s_per_gpu:,.0f} tok/s/GPU, "
            f"MFU {p.mfu:.0%}, {memory}")


def describe_prediction(cfg: Config, world: Optional[World] = None) -> List[str]:
    """The dry run's lines for `cluster.gpu`, in the run's world (its pre-flight's)."""
    cluster = cluster_of(cfg, world)
    p, hw, ms = predict(cfg, cluster), cluster.hardware, 1e3
    t = p.timeline
    between = cluster.host_s("step_host_us")
    exposed = t.step_s - t.compute_s - t.optimizer_s - between
    lines = [f"[predict] {hw.name} x {cluster.world} ({cluster.nodes} node(s) of "
             f"{cluster.gpus_per_node}): {t.step_s:.4g} s a step = compute {t.compute_s:.4g} s "
             f"+ exposed communication {exposed:.4g} s + optimizer {t.optimizer_s:.4g} s + "
             f"between steps {between:.4g} s",
             "[predict] per unit (ms): unit, parameters, all-gather, reduce-scatter, forward, "
             "backward (per microbatch)"]
    for name, unit, count in grouped(p.units):
        lines.append(f"  {name + (f' (x{count})' if count > 1 else ''):<28}{unit.params:>16,}"
                     + "".join(f"{v * ms:>10.3g}" for v in (unit.allgather_s, unit.reduce_s,
                                                           unit.forward_s, unit.backward_s)))
    lines.append(f"[predict] {p.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, "
                 f"{p.tflops_per_gpu:,.4g} TFLOP/s/GPU, MFU {p.mfu:.1%}, memory per GPU "
                 f"{fit(cfg, cluster).text()}")
    saving = ("cannot be compared" if p.saving_s is None
              else f"saves {p.saving_s * ms:.3g} ms a step ({p.saving_s / t.step_s:+.1%})")
    lines.append(f"[predict] fsdp.prefetch_first_param_group=true {saving}: {p.why}")
    return lines


def grouped(units: List[Unit]) -> List[tuple]:
    """(name, unit, count): runs of alike layers as one row."""
    rows = []
    for unit in units:
        same = rows and rows[-1][0].startswith("layer") and unit.name.startswith("layer") and \
            replace(rows[-1][1], name=unit.name) == unit
        if same:
            first = rows[-1][0].split("-")[0]
            rows[-1] = (f"{first}-{unit.name.split()[-1]}", rows[-1][1], rows[-1][2] + 1)
        else:
            rows.append((unit.name, unit, 1))
    return rows
