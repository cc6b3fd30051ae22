import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# `launch` beside this interpreter (a venv), else on PATH: on the lent GPU machine the GPU check
# installs it with --target, next to the machine's own python3 (gpu/check.py)
_BESIDE = Path(sys.executable).parent / "launch"
LAUNCH = str(_BESIDE) if _BESIDE.exists() else (shutil.which("launch") or str(_BESIDE))

# The path users take, shrunk for a CPU: the gpt recipe (bf16, full sharding) on the tiny model,
# with the recipe's warmups scaled to a 10-step run.
GPT_TINY = ["+recipe=gpt", "model=tiny", "train.steps=10", "train.lr_warmup_steps=2",
            "train.warmup_steps=2", "train.global_batch_size=8", "train.micro_batch_size=2"]


def make_config(*overrides):
    """The typed Config of `overrides`, through Hydra's real compose and the schema's checks."""
    from hydra import compose, initialize_config_module

    from launcher.cli import register_configs, to_config

    register_configs()
    with initialize_config_module(config_module="launcher.conf", version_base=None):
        return to_config(compose(config_name="config", overrides=list(overrides)))


def run_launch(tmp_path, *overrides, timeout=600):
    """`launch` as a user runs it, in a fresh process; returns (completed, run_dir)."""
    run_dir = tmp_path / "run"
    env = dict(os.environ, WANDB_SILENT="true", HOME=str(tmp_path / "home"))
    proc = subprocess.run([LAUNCH, *overrides, f"hydra.run.dir={run_dir}"], capture_output=True,
                          text=True, timeout=timeout, env=env)
    return proc, run_dir


def read_run(run_dir):
    summary = json.loads((run_dir / "summary.json").read_text())
    steps = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return summary, steps


def read_hparams(folder) -> tuple:
    """(hyperparameters, {metric tag: value}) of a TensorBoard run's HParams session, read with
    TensorBoard's own reader as its HParams dashboard reads them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata

    events = EventAccumulator(str(folder))
    events.Reload()
    content = events.PluginTagToContent(metadata.PLUGIN_NAME)
    start = metadata.parse_session_start_info_plugin_data(
        content[metadata.SESSION_START_INFO_TAG])
    experiment = metadata.parse_experiment_plugin_data(content[metadata.EXPERIMENT_TAG])
    hparams = {k: v.string_value if v.HasField("string_value") else v.number_value
               if v.HasField("number_value") else v.bool_value for k, v in start.hparams.items()}
    metrics = {m.name.tag: events.Scalars(m.name.tag)[-1].value for m in experiment.metric_infos}
    return hparams, metrics


def read_wandb(run_dir) -> dict:
    """A run's offline wandb file read back with `wandb leet inspect`: its summary, config and
    the keys of every history record."""
    [wandb_file] = Path(run_dir).glob("wandb/offline-run-*/run-*.wandb")
    wandb = str(Path(sys.executable).parent / "wandb")
    inspected = subprocess.run([wandb, "leet", "inspect", "--summary", "--json", str(wandb_file)],
                               capture_output=True, text=True, timeout=120, check=True)
    records = subprocess.run([wandb, "leet", "inspect", "--json", str(wandb_file)],
                             capture_output=True, text=True, timeout=120, check=True)
    run = json.loads(inspected.stdout)
    run["history_keys"] = {key for line in records.stdout.splitlines() if line.strip()
                           for key in json.loads(line).get("history", {}).get("item", {})}
    return run


def pytest_collection_modifyitems(items):
    """tests/unit's tests carry the `unit` marker: `make test` selects `unit or quick`."""
    unit = Path(__file__).parent / "unit"
    for item in items:
        if unit in Path(item.fspath).parents:
            item.add_marker(pytest.mark.unit)


@pytest.fixture(autouse=True)
def cpu_tiers_see_no_gpu(request, monkeypatch):
    """Every tier but tests/gpu tests the CPU path (gloo, the CPU layer), on any machine: on a GPU
    machine the processes its tests start see no GPU, as on CI's. (In this process, test modules
    that need the CPU layer are skipped on a CUDA machine, saying why.)"""
    if request.node.get_closest_marker("gpu") is None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


@pytest.fixture
def launch(tmp_path):
    return lambda *overrides: run_launch(tmp_path, *overrides)


# The commands the docs show (README.md, then docs/*.md), each run once per session as a new user
# types it, from a folder holding the checkout's .venv: test_readme.py runs every one; test_sweep.py
# and test_tune.py read their sweeps there instead of running sweeps of their own.
ROOT = Path(__file__).resolve().parents[1]
VENV = Path(sys.executable).parent.parent
SETUP = ("make ", ".venv/bin/python -m pytest")  # the commands that make and test the .venv
CPU_RUNS = ("+recipe=tiny_cpu ", "+recipe=tiny_cpu\n", "model=tiny", "sweep_tiny_cpu",
            "--help", "--cfg", "launch-prepare", "bench/megatron_lm_loop.py", "launch-hf ",
            "+recipe=llama_hf ")
# The Hugging Face model a page starts from, made where a command names it (tests/hf_models.py)
HF_MODELS = {"llama_tiny_hf": "llama"}
# A benchmark a page shows (`.venv/bin/python bench/NAME.py ...`) runs with these options
# appended (argparse keeps an option's last value): the same script and code path, a few steps.
# A page that shows another benchmark fails its test until the script has its entry here.
BENCH = ".venv/bin/python bench/"
BENCH_SHORT = {"bench/stress.py": ["--runs", "1", "--steps", "3"],
               "bench/calibrate.py": ["--ranks", "1", "--layers", "1", "2"],
               "bench/prediction.py": ["--repeats", "1", "--models", "gpt2", "--ranks", "1",
                                       "--steps", "6", "--layers", "1", "2"],
               "bench/published.py": []}


def doc_pages() -> list:
    """README.md, then docs/*.md in name order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def doc_commands() -> list:
    """The commands the docs show: the lines of README.md and docs/*.md indented by four spaces
    that start with `.venv/bin/` or `make ` (continuations joined, `  #` comments cut), in page
    order, each once (a command shown on two pages runs once); fenced blocks are not read. The
    set-up and test commands (SETUP) are left out: running them is what runs these."""
    commands, current = [], None
    for page in doc_pages():
        for line in page.read_text().splitlines():
            if current is None and not re.match(r"^    (\.venv/bin/|make )", line):
                continue
            text = line.split("  #")[0].strip()
            current = f"{current} {text}" if current else text
            if current.endswith("\\"):
                current = current[:-1].strip()
            else:
                commands.append(current)
                current = None
    return [c for c in dict.fromkeys(commands) if not c.startswith(SETUP)]


def runs_on_a_cpu(command: str) -> bool:
    """A command a CPU runs here; a Slurm one runs in tests/slurm, on a cluster."""
    return any(marker in command + "\n" for marker in CPU_RUNS) and "tiny_cpu_text" not in command \
        and "hydra/launcher=slurm" not in command


@pytest.fixture(scope="session")
def user_home(tmp_path_factory):
    """Where a user's shell is: the checkout's .venv at .venv and its bench/ and gpu/ (the scripts a
    page's benchmark runs), nothing else."""
    folder = tmp_path_factory.mktemp("user")
    (folder / ".venv").symlink_to(VENV)
    (folder / "bench").symlink_to(ROOT / "bench")
    (folder / "gpu").symlink_to(ROOT / "gpu")
    return folder


def as_tested(command: str) -> list:
    """The argv a doc command runs as in the tests: verbatim where a CPU runs it; a benchmark with
    its BENCH_SHORT options appended; anything else (a GPU, a cluster, the prepared dataset) with
    `runtime.dry_run=true` appended, which passes it through every pre-flight check."""
    args = command.split()
    if command.startswith(BENCH):
        if args[1] not in BENCH_SHORT:
            pytest.fail(f"{command}: a benchmark the docs show needs its short options in "
                        "tests/conftest.py BENCH_SHORT")
        return args + BENCH_SHORT[args[1]]
    dry = runs_on_a_cpu(command) or "runtime.dry_run=true" in args
    return args if dry else args + ["runtime.dry_run=true"]


@pytest.fixture(scope="session")
def doc_command(user_home):
    """run(command) -> the completed process of a doc command (`as_tested`), run once in this
    session."""
    done = {}

    def run(command: str) -> subprocess.CompletedProcess:
        if command not in done:
            for folder, kind in HF_MODELS.items():
                if folder in command.split() and not (user_home / folder).exists():
                    from hf_models import save_tiny

                    save_tiny(kind, user_home / folder)
            env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
            env["HOME"] = str(user_home / "home")
            done[command] = subprocess.run(as_tested(command), cwd=user_home, env=env,
                                           capture_output=True, text=True, timeout=900)
        return done[command]

    return run
