"""The dry run's prediction as text: the `[predict]` lines of `runtime.dry_run=true` with
`cluster.gpu` set, and a sweep plan's predicted column (the model: launcher/estimate/predict.py)."""

from dataclasses import replace
from typing import List, Optional, Tuple

from launcher.config import Config, World
from launcher.estimate.fit import fit
from launcher.estimate.predict import Prediction, Unit, cluster_of, predict, predict_band


def short(cfg: Config, world: Optional[World] = None) -> Tuple[str, Tuple[float, ...]]:
    """A sweep plan's predicted column, for the cell's world (its pre-flight's), and the step's
    (slow, middle, fast) seconds."""
    cluster = cluster_of(cfg, world)
    p, verdict = predict(cfg, cluster), fit(cfg, cluster)
    slow, fast = predict_band(cfg, cluster)
    memory = (f"{verdict.memory_gib:.0f} GiB" if verdict.fits else
              f"DOES NOT FIT: {verdict.memory_gib:.0f} GiB of {verdict.capacity_gib:g}"
              + (f", fits with {verdict.change.overrides}" if verdict.change else ""))
    steps = (slow.timeline.step_s, p.timeline.step_s, fast.timeline.step_s)
    return (f"{p.timeline.step_s:.3g} s/step{span(fast.timeline.step_s, slow.timeline.step_s)}, "
            f"{p.tokens_per_s_per_gpu:,.0f} tok/s/GPU, MFU {p.mfu:.0%}, {memory}"), steps


def span(low: float, high: float, fmt: str = ".3g", unit: str = "") -> str:
    """" (LOW-HIGH)" where the band has a width, else ""."""
    if low == high:
        return ""
    return f" ({low:{fmt}}-{high:{fmt}}{unit})"


def describe_prediction(cfg: Config, world: Optional[World] = None) -> List[str]:
    """The dry run's lines for `cluster.gpu`, in the run's world (its pre-flight's)."""
    cluster = cluster_of(cfg, world)
    p, hw, ms = predict(cfg, cluster), cluster.hardware, 1e3
    t = p.timeline
    between = cluster.host_s("step_host_us")
    exposed = max(0.0, t.step_s - t.compute_s - t.optimizer_s - between)  # not -2.8e-17
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
    slow, fast = predict_band(cfg, cluster)
    lines.append(f"[predict] {p.tokens_per_s_per_gpu:,.0f}"
                 f"{span(slow.tokens_per_s_per_gpu, fast.tokens_per_s_per_gpu, ',.0f')} "
                 f"tokens/s/GPU, {p.tflops_per_gpu:,.4g}"
                 f"{span(slow.tflops_per_gpu, fast.tflops_per_gpu, ',.4g')} TFLOP/s/GPU, "
                 f"MFU {p.mfu:.1%}{span(slow.mfu * 100, fast.mfu * 100, '.1f', '%')}, memory per "
                 f"GPU {fit(cfg, cluster).text()}")
    if cluster.kernel_classes:  # a CPU's figures are measured: no band
        lines.append(f"[predict] the range runs from every kernel class's rate at the low end of "
                     f"its public measurements to every one at the high end (hardware/"
                     f"{cfg.cluster.gpu}.yaml, docs/prediction.md)")
    lines += above_published(cfg, p, slow)
    if p.saving_s is None:
        saving = "cannot be compared"
    else:
        savings = sorted(x.saving_s * ms for x in (slow, fast))
        saving = (f"saves {p.saving_s * ms:.3g} ms a step{span(*savings, unit=' ms')} "
                  f"({p.saving_s / t.step_s:+.1%})")
    lines.append(f"[predict] fsdp.prefetch_first_param_group=true {saving}: {p.why}")
    return lines


def above_published(cfg: Config, p: Prediction, slow: Prediction) -> List[str]:
    """A line where even the band's slow end predicts an MFU above every published run of the
    GPU kind in the run's dtype: the figure is then an upper bound, and says so."""
    hw = cfg.cluster.hardware()
    math = cfg.train.matmul_dtype
    best = (hw.published_mfu or {}).get(math)
    if best is None or p.mfu <= best:
        return []
    bound = ", even at the range's slow end" if slow.mfu > best else ""
    return [f"[predict] MFU {p.mfu:.1%} is above every published figure for {hw.name} {math}: "
            f"{best:.0%} (hardware/{cfg.cluster.gpu}.yaml names the run){bound}; read the "
            "prediction as an upper bound: the model leaves out what such runs also spend "
            "(docs/prediction.md)"]


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
