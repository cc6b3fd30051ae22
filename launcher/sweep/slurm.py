"""Pre-flight of a submitit launcher (hydra/launcher=slurm, submitit_slurm, submitit_local): its
values make sense, and where `sinfo` answers, some node of the partition can take the job.

Runs before any job is submitted: a value that could only fail inside sbatch, or pend for ever,
is refused here in one line naming the key; then, where Slurm answers, `sbatch --test-only` of the
very batch script the sweep will submit (submitit writes it; nothing is submitted) refuses what
Slurm itself would refuse (an unknown feature, account or QoS, a time over the partition's limit).
"""

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from typing import List, Optional

from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from launcher.preflight.ranks import is_submitit
from launcher.config.values import shown
from launcher.sweep.console import print_slurm_silent, print_test_only_silent
from launcher.sweep.error import SweepError

# How long sinfo and `sbatch --test-only` may take: a controller answers within its
# MessageTimeout (Slurm's default: 10 s); with no Slurm configured, sinfo looks for one until
# this ends, so it is also how long a user without Slurm waits for the refusal.
SINFO_TIMEOUT_S = 15


def is_slurm(launcher: DictConfig) -> bool:
    return str(launcher.get("_target_", "")).endswith("SlurmLauncher")


def value(launcher: DictConfig, key: str):
    """hydra.launcher.<key>, or a one-line error where it cannot be resolved (the preset's
    tasks_per_node follows gpus_per_node, which may be null)."""
    try:
        return launcher.get(key)
    except OmegaConfBaseException as err:
        raise SweepError(f"hydra.launcher.{key} cannot be resolved "
                         f"({str(err).splitlines()[0]}); set hydra.launcher.{key} to a number")


def check_launcher(launcher: DictConfig, dry_run: bool) -> None:
    """One rank per task: on GPU nodes one task per GPU, on CPU nodes (gpus_per_node 0 or null)
    an explicit tasks_per_node; then, for Slurm, the partition's nodes and sbatch --test-only. A
    Slurm that does not answer refuses the sweep, unless it is a dry run (which says so)."""
    if not is_submitit(launcher):
        return
    gpus = launcher.get("gpus_per_node", None) if "gpus_per_node" in launcher else None
    if gpus is None or gpus == 0:
        try:
            tasks = launcher.get("tasks_per_node")
        except OmegaConfBaseException:
            tasks = None
        if not isinstance(tasks, int) or tasks < 1:
            raise SweepError(
                f"hydra.launcher.tasks_per_node={shown(tasks)} with hydra.launcher.gpus_per_node="
                f"{shown(gpus)}: "
                "on CPU nodes each task is one rank and its count is not implied by the GPUs; "
                "set hydra.launcher.tasks_per_node=N (the ranks per node)")
    else:
        tasks = value(launcher, "tasks_per_node")
        if gpus != tasks:
            raise SweepError(
                f"hydra.launcher.tasks_per_node={tasks} with hydra.launcher.gpus_per_node={gpus}: "
                f"each GPU needs its own task (one rank per GPU); set "
                f"hydra.launcher.tasks_per_node={gpus}")
    for key, least in (("nodes", 1), ("cpus_per_task", 1), ("timeout_min", 1),
                       ("gpus_per_node", 0), ("mem_gb", 0)):
        number = value(launcher, key) if key in launcher else None
        if number is not None and (not isinstance(number, int) or number < least):
            kind = "a positive whole number" if least else "a whole number >= 0"
            raise SweepError(f"hydra.launcher.{key}={number} must be {kind}; "
                             f"set hydra.launcher.{key}={least} or more")
    if not is_slurm(launcher):
        return
    try:
        check_partition(launcher, tasks, gpus or 0)
    except SlurmSilent as err:
        if not dry_run:
            raise SweepError(f"hydra.launcher submits to Slurm, but no Slurm answers here ({err}); "
                             "run the sweep where sinfo and sbatch reach the cluster (a login "
                             "node, SLURM_CONF), or use hydra/launcher=submitit_local")
        print_slurm_silent(err)
        return
    check_test_only(launcher)


@dataclass(frozen=True)
class Node:
    name: str
    cpus: int
    memory_mb: int
    gpus: int


def gpu_count(gres: str) -> int:
    """GPUs in sinfo's %G: `gpu:8`, `gpu:h100:8(S:0-1)`, `(null)`, or a comma-separated list."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) > 1 and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def sinfo_nodes() -> str:
    """sinfo's line per node and partition; raises SlurmSilent where Slurm does not answer."""
    if shutil.which("sinfo") is None:
        raise SlurmSilent("sinfo is not on PATH")
    command = ["sinfo", "-h", "-N", "-o", "%N|%c|%m|%G|%P"]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=SINFO_TIMEOUT_S)
    except (subprocess.SubprocessError, OSError) as err:
        raise SlurmSilent(f"sinfo: {str(err).splitlines()[0]}")
    if proc.returncode != 0:
        said = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
        raise SlurmSilent(said[-1] if said else f"sinfo exited {proc.returncode}")
    return proc.stdout


class SlurmSilent(Exception):
    """No Slurm controller answers here (no sinfo, no slurm.conf, slurmctld down)."""


def partition_nodes(partition: Optional[str]) -> tuple:
    """(partition name, its nodes) from sinfo; raises SlurmSilent where it does not answer."""
    out = sinfo_nodes()
    rows = [line.split("|") for line in out.splitlines() if line.count("|") == 4]
    names = sorted({r[4].rstrip("*") for r in rows})
    if partition is None:
        default = [r[4].rstrip("*") for r in rows if r[4].endswith("*")]
        if not default:
            raise SweepError(f"Slurm has no default partition (sinfo lists {', '.join(names)}); "
                             "set hydra.launcher.partition")
        partition = default[0]
    if partition not in names:
        raise SweepError(f"hydra.launcher.partition={partition}: Slurm has no such partition "
                         f"(sinfo lists {', '.join(names) or 'none'}); set one of those")
    nodes = [Node(r[0], int(r[1].rstrip("+")), int(r[2].rstrip("+")), gpu_count(r[3]))
             for r in rows if r[4].rstrip("*") == partition]
    return partition, nodes


def check_partition(launcher: DictConfig, tasks: int, gpus: int) -> None:
    """Some `nodes` nodes of the partition each hold tasks x cpus_per_task CPUs, mem_gb and the
    GPUs; else the job would pend for ever. The first shortfall is named with its key."""
    partition, nodes = partition_nodes(launcher.get("partition"))
    cpus_per_task = launcher.get("cpus_per_task") or 1
    mem_gb = launcher.get("mem_gb")
    wanted_nodes = launcher.get("nodes") or 1
    needs = [
        ("CPUs", tasks * cpus_per_task, lambda n: n.cpus,
         f"hydra.launcher.cpus_per_task={cpus_per_task} x hydra.launcher.tasks_per_node={tasks}",
         "lower hydra.launcher.cpus_per_task"),
        ("GB of memory", mem_gb or 0, lambda n: n.memory_mb // 1024,
         f"hydra.launcher.mem_gb={mem_gb}", "lower hydra.launcher.mem_gb, or set it to null"),
        ("GPUs", gpus, lambda n: n.gpus, f"hydra.launcher.gpus_per_node={gpus}",
         "lower hydra.launcher.gpus_per_node (0 on CPU nodes)"),
    ]
    able: List[Node] = list(nodes)
    for what, need, has, keys, fix in needs:
        best = max((has(n) for n in able), default=0)
        if need > best:
            raise SweepError(f"{keys} needs {need} {what} on a node, but the nodes of Slurm "
                             f"partition {partition} have at most {best} (sinfo); {fix}")
        able = [n for n in able if has(n) >= need]
    if len(able) < wanted_nodes:
        raise SweepError(f"hydra.launcher.nodes={wanted_nodes}, but Slurm partition {partition} "
                         f"has {len(able)} node(s) that can take the tasks (sinfo); set "
                         f"hydra.launcher.nodes={len(able)} or less")


def executor_for(params: dict, kind: str):
    """A submitit executor built from hydra.launcher's values as hydra-submitit-launcher builds
    its own (its `launch`), the GPU request dropped on CPU nodes."""
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from omegaconf import OmegaConf

    params = dict(params)
    init = {"folder": params.pop("submitit_folder")}
    if "max_num_timeout" in params:
        init[f"{kind}_max_num_timeout"] = params.pop("max_num_timeout")
    if params.get("gpus_per_node") == 0:  # CPU nodes: no GPU request at all
        params["gpus_per_node"] = None
    executor = submitit.AutoExecutor(cluster=kind, **init)
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(**{k if k in base else f"{kind}_{k}": v
                                  for k, v in params.items()})
    return executor


# The script's options that the launcher, not the user, sets: left out of the refusal's line.
OWN_OPTIONS = ("--job-name", "--output", "--error", "--open-mode", "--signal", "--wckey")


def check_test_only(launcher: DictConfig) -> None:
    """`sbatch --test-only` of a job's batch script, as the sweep will submit it: Slurm's own
    answer to whether it would take the job (it submits nothing)."""
    from omegaconf import OmegaConf

    params = OmegaConf.to_container(launcher, resolve=True)
    params.pop("_target_", None)
    # submitit's own writer of the batch script (AutoExecutor wraps the SlurmExecutor that has it)
    script = executor_for(params, "slurm")._executor._make_submission_file_text(
        "true", "preflight")
    with tempfile.NamedTemporaryFile("w", suffix=".sh") as f:
        f.write(script)
        f.flush()
        try:
            proc = subprocess.run(["sbatch", "--test-only", f.name], capture_output=True,
                                  text=True, timeout=SINFO_TIMEOUT_S)
        except (subprocess.SubprocessError, OSError) as err:
            print_test_only_silent(err)
            return
    if proc.returncode != 0:
        words = " ".join(proc.stderr.replace("sbatch: error:", "").split()) or "no reason given"
        options = [line.split(None, 1)[1] for line in script.splitlines()
                   if line.startswith("#SBATCH ") and not line.split()[1].startswith(OWN_OPTIONS)]
        raise SweepError(f"Slurm refuses the job hydra.launcher describes: sbatch --test-only "
                         f"says \"{words}\" of {' '.join(options)}; fix the hydra.launcher value "
                         "behind that option")
