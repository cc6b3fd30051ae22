"""A run's outputs as it trains: the per-step metrics as declared, and what writes them: the
metrics.jsonl stream, the loggers and the console line.

Each per-step metric is one `Metric`, declared beside what measures it (launcher.run.record for the
step's own, each step hook for its own: launcher.run.hooks); `StepOutputs` writes a step's values
through those declarations and nothing else, so a metric's names cannot differ between outputs.

A logger has two methods, `log(metrics, step)` and `close(status, results, step)` (the run's end:
ok, or the failure's class as summary.json has it, and the run's results, its summary's metrics,
where it got that far): wandb's, TensorBoard's, the null one, and `Loggers`, which hands each call
to several. The results go where each dashboard compares runs, not into its per-step series:
wandb's run summary (its runs table and parallel-coordinates panels; the swept keys are in the
run's config), TensorBoard's HParams dashboard. Each takes its settings from its arguments;
none reads the environment (wandb itself reads the WANDB_* variables its logger sets).
"""

import json
import os
import shlex
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from launcher.files import write_text_atomic
from launcher.run.console import SEPARATOR, step_column


@dataclass(frozen=True)
class Metric:
    """One per-step metric, declared once: its metrics.jsonl key, its name on the dashboards
    (wandb's and TensorBoard's; None: not charted, a list say), its unit, what it is (for
    docs/outputs.md), and its part of the console's step line, a fixed-width text of the value
    (launcher.run.console; None: not printed; a null value prints no part)."""

    key: str
    dashboard: Optional[str]
    unit: str
    what: str
    console: Optional[Callable[[Any], str]] = None


def metric_table(declared: Sequence[Metric]) -> str:
    """The per-step metrics as docs/outputs.md's table (tests/unit/test_step_metrics.py holds the
    page to it)."""
    rows = ["| metrics.jsonl | wandb, TensorBoard | unit | console | what |",
            "|---|---|---|---|---|"]
    rows += [f"| `{m.key}` | {f'`{m.dashboard}`' if m.dashboard else 'not charted'} | "
             f"{m.unit} | {'yes' if m.console else ''} | {m.what} |" for m in declared]
    return "\n".join(rows) + "\n"


class StepOutputs:
    """Rank 0's per-step outputs: a step's values, by their metrics' keys, into metrics.jsonl (in
    the declarations' order; a null as null), the loggers (numbers only: a null makes an empty
    chart) and, where `console` is on, one console line of the parts its metrics print, in the
    declarations' order (a null prints none)."""

    def __init__(self, jsonl: "MetricsFile", logger, declared: Sequence[Metric], steps: int,
                 console: bool):
        self.jsonl, self.logger, self.steps, self.console = jsonl, logger, steps, console
        self.declared = {m.key: m for m in declared}

    def write(self, step: int, values: dict) -> None:
        unknown = set(values) - set(self.declared)
        if unknown:  # a value no Metric declares would reach no dashboard, or a different name
            raise ValueError(f"undeclared per-step metrics {sorted(unknown)}: declare a Metric")
        known = [m for m in self.declared.values() if m.key in values]
        self.jsonl.write({"step": step, **{m.key: values[m.key] for m in known}})
        self.logger.log({m.dashboard: values[m.key] for m in known
                         if m.dashboard and values[m.key] is not None}, step=step)
        parts = [m.console(values[m.key]) for m in known
                 if m.console and values[m.key] is not None]
        if self.console and parts:
            print(SEPARATOR.join([step_column(step, self.steps), *parts]), flush=True)

    def close(self, status: str, results: dict, step: int) -> None:
        """metrics.jsonl closed, then every logger, with the run's status and results."""
        self.jsonl.close()
        self.logger.close(status, results, step)


def open_loggers(logging, run_dir: str, config: dict):
    """Rank 0's loggers: wandb unless disabled, TensorBoard if enabled."""
    from launcher.config import WandbMode

    chosen = []
    if logging.wandb.mode != WandbMode.disabled:
        chosen.append(WandbLogger(logging.wandb, run_dir, config,
                                  logging.wandb.name or os.path.basename(run_dir)))
    if logging.tensorboard.enabled:
        folder = os.path.join(logging.tensorboard.dir or os.path.join(run_dir, "tb"),
                              logging.tensorboard.name or os.path.basename(run_dir))
        chosen.append(TensorboardLogger(folder, config,
                                        hparam_values(config, logging.tensorboard.hparams)))
    return Loggers(chosen) if chosen else NullLogger()


class NullLogger:
    """The logger of non-zero ranks, and of a run with every logger off."""

    def log(self, metrics: dict, step: int) -> None:
        pass

    def close(self, status: str = "ok", results: Optional[dict] = None, step: int = 0) -> None:
        pass


class Loggers:
    """Several loggers as one."""

    def __init__(self, loggers: list):
        self._loggers = loggers

    def log(self, metrics: dict, step: int) -> None:
        for logger in self._loggers:
            logger.log(metrics, step)

    def close(self, status: str = "ok", results: Optional[dict] = None, step: int = 0) -> None:
        for logger in self._loggers:
            logger.close(status, results, step)


class TensorboardLogger:
    """Rank 0's TensorBoard run: torch's SummaryWriter in `folder`; the resolved config as text
    (tag `config`), then a scalar per metric and logged step, under wandb's names; at the end the
    `hparams` (config key -> value) against the results, for the HParams dashboard."""

    def __init__(self, folder: str, config: dict, hparams: dict):
        from omegaconf import OmegaConf
        from torch.utils.tensorboard import SummaryWriter

        self._hparams = hparams
        self._writer = SummaryWriter(log_dir=folder)
        text = OmegaConf.to_yaml(OmegaConf.create(config))
        self._writer.add_text("config", "    " + text.replace("\n", "\n    "))  # markdown code
        # quoted: a sweep's run names hold spaces and `#`, which a shell would cut
        print(f"[launch] tensorboard: {folder}; look at it with "
              f"`tensorboard --logdir {shlex.quote(folder)}`", flush=True)

    def log(self, metrics: dict, step: int) -> None:
        for key, value in metrics.items():
            if number(value):
                self._writer.add_scalar(key, value, step)

    def close(self, status: str = "ok", results: Optional[dict] = None, step: int = 0) -> None:
        """The HParams session (what SummaryWriter.add_hparams writes, here into this run's own
        event file rather than a sub-run): the hyperparameters, then each numeric result as a
        `summary/*` scalar at the last step, the metrics the dashboard reads."""
        from torch.utils.tensorboard.summary import hparams

        metrics = {f"summary/{k}": v for k, v in (results or {}).items() if number(v)}
        for proto in hparams(self._hparams, metrics):
            self._writer.file_writer.add_summary(proto, step)
        for key, value in metrics.items():
            self._writer.add_scalar(key, value, step)
        self._writer.add_text("summary/status", status)
        self._writer.close()


def number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def hparam_values(config: dict, keys: list) -> dict:
    """The HParams dashboard's values of `keys` (dotted) in the run's config: numbers, booleans
    and text as they are, null as "null" (the dashboard drops a None)."""
    from launcher.config.schema import lookup

    values = {key: lookup(config, key) for key in keys}
    return {k: "null" if v is None else v if isinstance(v, (bool, int, float, str)) else str(v)
            for k, v in values.items()}


class WandbLogger:
    """Rank 0's wandb run; every wandb file stays under the run directory. `announce`: a line on
    where it is and what looks at it (a sweep says that once for all its runs instead)."""

    def __init__(self, wandb_cfg, run_dir: str, config: dict, name: str, job_type: str = "train",
                 announce: bool = True):
        wandb_dir = os.path.join(run_dir, "wandb")
        os.makedirs(wandb_dir, exist_ok=True)
        # wandb reads these at init; without them it also writes under the home directory.
        os.environ["WANDB_DIR"] = run_dir  # wandb writes into <WANDB_DIR>/wandb
        for var in ("WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
            os.environ[var] = wandb_dir
        import wandb

        self._run = wandb.init(
            mode=wandb_cfg.mode.value, project=wandb_cfg.project, entity=wandb_cfg.entity,
            group=wandb_cfg.group, tags=list(wandb_cfg.tags), config=config, name=name,
            dir=run_dir, job_type=job_type,
            settings=wandb.Settings(silent=not wandb_cfg.verbose),
        )
        self._wandb = wandb
        if announce and not wandb_cfg.verbose:
            print(f"[launch] wandb: {where(self._run)}", flush=True)

    @property
    def group_url(self) -> Optional[str]:
        """The web page of the run's group (a sweep's runs side by side); None offline."""
        if self._run.settings.mode == "offline" or not self._run.group or \
                not self._run.project_url:
            return None
        from urllib.parse import quote

        return f"{self._run.project_url}/groups/{quote(self._run.group, safe='')}"

    def log(self, metrics: dict, step: int) -> None:
        self._run.log(metrics, step=step)

    def log_table(self, key: str, columns: list, rows: list) -> None:
        self._run.log({key: self._wandb.Table(columns=columns, data=rows)})

    def close(self, status: str = "ok", results: Optional[dict] = None, step: int = 0) -> None:
        """The results into the run's summary (not its history: one-point charts), then the
        status."""
        self._run.summary.update({f"summary/{k}": v for k, v in (results or {}).items()
                                  if v is not None})
        self._run.summary["summary/status"] = status
        self._run.finish(exit_code=0 if status == "ok" else 1)  # wandb marks the run failed


def where(run) -> str:
    """One line on where a wandb run is and what to do with it, its folder named once."""
    if run.settings.mode == "offline":
        folder = os.path.dirname(run.dir)  # <run dir>/wandb/offline-run-*/files -> the run
        return f"offline run {folder} (`wandb leet` looks at it, `wandb sync` sends it)"
    return f"{run.url}"


class MetricsFile:
    """metrics.jsonl: one JSON object per logged step, flushed as it is written. A resumed run
    keeps the records of the steps before `first_step` and drops the rest (the steps it redoes)."""

    def __init__(self, path: str, first_step: int = 1):
        if first_step > 1 and os.path.exists(path):
            with open(path) as f:
                kept = [line for line in f if line.strip() and json.loads(line)["step"] < first_step]
            write_text_atomic(path, "".join(kept))
        self._file = open(path, "w" if first_step == 1 else "a")

    def write(self, record: dict) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()
