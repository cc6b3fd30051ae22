"""A catalogue of bad input, each a command a user could type: exit code 2, one line on stderr
naming the key and the fix, no traceback, and nothing half-written."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

LAUNCH = str(Path(sys.executable).parent / "launch")
FIX = re.compile(r"\b(set|give|pick|add|remove|change|lower|make|use|see|check|run|fix|quote|"
                 r"prepare)\b")

CATALOGUE = [
    # unknown keys
    (["model.hidden_sise=64"], "model.hidden_sise is not a config key (did you mean "
                               "model.hidden_size, model.ffn_hidden_size or "),
    (["+model.foo=1"], "model.foo is not a config key"),
    (["+logging.wandb.colour=red"], "logging.wandb.colour is not a config key"),
    # a misspelled key names the schema's nearest keys (the run's own message, not Hydra's)
    (["fsdp.prefetch_first_param_grp=false"], "fsdp.prefetch_first_param_grp is not a config key "
                                              "(did you mean fsdp.prefetch_first_param_group?)"),
    (["+fsdp.prefetch_first_param_grp=false"],
     "(added with +; did you mean fsdp.prefetch_first_param_group?)"),
    # wrong types
    (["model.num_layers=two"], "give model.num_layers an integer"),
    (["train.lr=abc"], "give train.lr a number"),
    (["fsdp.overlap_grad_reduce=maybe"], "give fsdp.overlap_grad_reduce true or false"),
    (["train.steps=null"], "give train.steps a value (it cannot be null)"),
    # bad enum values
    (["fsdp.sharding_strategy=zero3"], "set fsdp.sharding_strategy to one of those"),
    (["cuda_graph.impl=sometimes"], "set cuda_graph.impl to one of those"),
    # an enum's list names only the values a run can use, and why the others are left out
    (["cuda_graph.impl=full"], "cuda_graph.impl=full: Invalid value 'full', expected one of "
                               "[none, full_iteration] (local and transformer_engine: per-layer "
                               "graphs, which Megatron-FSDP in megatron-core does not support "
                               "yet); set cuda_graph.impl to one of those"),
    (["cuda_graph.modules=[atn]"], "expected one of [attn, mlp"),
    (["runtime.device=tpu"], "set runtime.device to one of those"),
    (["train.precision=fp8"], "set train.precision to one of those"),
    (["train.fp8.format=e5m2"], "set train.fp8.format to one of those"),
    # missing recipe or option, bad command-line syntax
    (["+recipe=nope"], "recipe=nope: no such option in `recipe`; pick one of: "
                       "deepseek_v3_proxy,"),
    (["model=huge"], "model=huge: no such option in `model`; pick one of: deepseek_tiny, "
                     "deepseek_v3_proxy, gpt2_small,"),
    (["recipe=gpt"], "add it with +recipe=gpt"),
    (["train.steps=[1,2"], "cannot parse an override"),
    # incompatible CUDA-graph cells
    (["cuda_graph=full_iteration"], "set fsdp.prefetch_first_param_group=false"),
    (["cuda_graph.impl=local", "fsdp.prefetch_first_param_group=false"],
     "cuda_graph.impl=local (per-layer graphs) is not supported"),
    (["cuda_graph=full_iteration", "fsdp.prefetch_first_param_group=false",
      "cuda_graph.modules=[attn]"], "set cuda_graph.modules=[]"),
    (["cuda_graph=full_iteration", "fsdp.prefetch_first_param_group=false",
      "train.check_nan_in_grad=true"], "set train.check_nan_in_grad=false"),
    (["cuda_graph.warmup_steps=-1"], "cuda_graph.warmup_steps=-1 must be >= 0"),
    # architectures megatron-core would assert on, or the local spec cannot capture
    (["+recipe=moe_small_tiny_cpu", "cuda_graph=full_iteration",
      "fsdp.prefetch_first_param_group=false"], "set cuda_graph.impl=none, or model.moe."),
    (["model=moe_tiny", "parallel.expert_model_parallel_size=3"],
     "must divide model.moe.num_experts=4"),
    (["+recipe=deepseek_v3_proxy_tiny_cpu", "runtime.nproc_per_node=2"],
     "fsdp.num_distributed_optimizer_instances=2 must divide the expert data-parallel size 1"),
    # fused kernels asked for where they cannot run, or where they have nothing to fuse
    (["model.fusions.gradient_accumulation=true"],
     "model.fusions.gradient_accumulation=true cannot run on a CPU"),
    (["model.fusions.rope=true"], "model.fusions.rope=true has no effect: "
                                  "model.position_embedding=learned_absolute"),
    (["model.hidden_dropout=1"], "model.hidden_dropout=1.0 must lie in [0, 1)"),
    # Megatron-FSDP knobs megatron would assert on, or a CPU cannot run
    (["fsdp.nccl_ub=true"], "set fsdp.double_buffer=true"),
    (["+recipe=tiny_cpu", "fsdp.nccl_ub=true", "fsdp.double_buffer=true"],
     "set fsdp.nccl_ub=false, or run on GPUs"),
    (["+recipe=tiny_cpu", "fsdp.double_buffer=true"], "set fsdp.double_buffer=false, or run on"),
    (["+recipe=gpt", "fsdp.main_params_dtype=bf16"],
     "set fsdp.main_params_dtype=fp32, or train.grad_clip=0"),
    (["fsdp.grad_comm_dtype=fp16"], "set fsdp.grad_comm_dtype to one of those"),
    # FP8 where it cannot act (tiny_cpu is fp32), or where Megatron-FSDP cannot keep FP8 weights
    (["train.fp8.format=hybrid"], "and train.precision=fp32; set train.precision=bf16"),
    (["+recipe=gpt", "train.fp8.format=hybrid", "train.fp8.param_gather=true",
      "fsdp.sharding_strategy=optim", "fsdp.prefetch_first_param_group=false"],
     "set fsdp.sharding_strategy=optim_grads_params, or train.fp8.param_gather=false"),
    (["train.fp8.recipe=mxfp8"], "train.fp8.recipe=mxfp8 has no effect with "
                                 "train.fp8.format=null; set train.fp8.format=e4m3 or hybrid"),
    # a profiling window outside the run, on no rank of it, or needing a GPU on a CPU
    (["+recipe=tiny_cpu", "profile=torch", "profile.steps=[19,25]"],
     "profile.steps=[19, 25] lies outside the run's steps 1..20; set profile.steps"),
    (["+recipe=tiny_cpu", "profile=torch", "profile.ranks=[0,2]"],
     "profile.ranks=[0, 2] names rank 2, outside the world of 1"),
    (["+recipe=tiny_cpu", "profile=nsys"], "set profile=torch (a Chrome trace of the CPU run)"),
    (["+recipe=tiny_cpu", "profile=torch", "profile.memory=true"],
     "set profile.memory=false (the trace still shows the window), or run on GPUs"),
    # impossible parallel sizes and batches
    (["runtime.nproc_per_node=3"], "set train.global_batch_size to a multiple of 6"),
    (["parallel.tensor_model_parallel_size=3"],
     "model.num_attention_heads=4 is not divisible by parallel.tensor_model_parallel_size=3"),
    (["runtime.nproc_per_node=3", "parallel.tensor_model_parallel_size=2"],
     "world size 3 (runtime.nproc_per_node x runtime.nnodes) is not divisible by tp x pp x cp"),
    (["train.global_batch_size=7"], "train.global_batch_size=7 is not divisible by "
                                    "train.micro_batch_size=2"),
    (["train.micro_batch_size=0"], "train.micro_batch_size=0 must be at least 1"),
    (["model.num_query_groups=3"], "model.num_query_groups=3 must divide"),
    (["model.hidden_size=65"], "model.hidden_size=65 is not divisible by "
                               "model.num_attention_heads=4"),
    # settings Megatron-FSDP would force or ignore
    (["fsdp.sharding_strategy=no_shard"], "set fsdp.prefetch_first_param_group=false"),
    (["fsdp.overlap_param_gather=false", "fsdp.prefetch_first_param_group=false"],
     "set fsdp.overlap_param_gather=true"),
    # the loop and the runtime
    (["train.lr=-1"], "train.lr=-1.0 must be positive"),
    (["train.lr_warmup_steps=-1"], "train.lr_warmup_steps=-1 must be >= 0"),
    (["logging.interval=0"], "logging.interval=0 must be at least 1"),
    (["runtime.nnodes=2"], "set runtime.rdzv_endpoint=HOST:PORT"),
    (["runtime.rdzv_endpoint=node1"], "runtime.rdzv_endpoint=node1 is not HOST:PORT"),
    (["runtime.timeout_s=0"], "runtime.timeout_s=0 must be at least 1"),
    (["sweep.repeats=0"], "sweep.repeats=0 must be at least 1"),
    (["-m", "sweep.pending_limit_min=0"], "sweep.pending_limit_min=0.0 must be more than 0"),
    # the Slurm preset on CPU nodes: the task count is not implied by the GPUs
    (["-m", "hydra/launcher=slurm", "hydra.launcher.gpus_per_node=0"],
     "hydra.launcher.tasks_per_node=0 with hydra.launcher.gpus_per_node=0: on CPU nodes"),
    (["-m", "hydra/launcher=slurm", "hydra.launcher.gpus_per_node=null"],
     "set hydra.launcher.tasks_per_node=N"),
    (["-m", "hydra/launcher=slurm", "hydra.launcher.gpus_per_node=0",
      "hydra.launcher.tasks_per_node=2", "hydra.launcher.nodes=0"],
     "hydra.launcher.nodes=0 must be a positive whole number"),
    # no Slurm here (the test's SLURM_CONF names no file): refused before anything is submitted
    (["-m", "hydra/launcher=slurm", "hydra.launcher.gpus_per_node=0",
      "hydra.launcher.tasks_per_node=2"],
     "hydra.launcher submits to Slurm, but no Slurm answers here"),
    # data
    (["data=indexed"], "data=indexed needs data.path; set data.path=PREFIX"),
    (["data=indexed", "data.path=/nonexistent/corpus"],
     "data.path: /nonexistent/corpus.idx does not exist; run `launch-prepare"),
    (["data=indexed", "data.path=0.5 /a 0.5"], "weights and prefixes must alternate"),
    (["data=indexed", "data.path=/a", "data.split='98,2'"], "data.split=98,2 is not three"),
    (["data=indexed", "data.path=/a", "data.split=98,2,0"], "data.split=98,2,0: a comma makes "
                                                            "a sweep; quote the value"),
    (["train.eval_interval=-1"], "train.eval_interval=-1 must be >= 0"),
    # where the run writes
    (["hydra.run.dir=/etc/hostname/run"], "cannot write /etc/hostname/run: Not a directory; set "
                                          "hydra.run.dir"),
    (["train.checkpoint.interval=5", "train.checkpoint.dir=/etc/hostname/ckpt"],
     "train.checkpoint: /etc/hostname/ckpt cannot hold checkpoints (/etc/hostname is a file); "
     "set train.checkpoint.dir to a writable directory"),
    (["logging.tensorboard.enabled=true", "logging.tensorboard.dir=/etc/hostname/tb"],
     "logging.tensorboard.dir=/etc/hostname/tb cannot be written (/etc/hostname is a file)"),
    (["data.cache_dir=/etc/hostname/cache"],  # with mock data: unwritable with real data below
     "data.cache_dir=/etc/hostname/cache has no effect with data.kind=mock; set data=indexed"),
    # values megatron would assert on inside a rank, or numpy refuse
    (["train.min_lr=1"], "train.min_lr=1.0 must lie between 0 and train.lr"),
    (["train.weight_decay=-1"], "train.weight_decay=-1.0 must be >= 0"),
    (["train.seed=-1"], "train.seed=-1 must lie between 0 and 2**32-1"),
    # a sweep value that is not a value of its key refuses the whole sweep, before any run
    (["-m", "fsdp.prefetch_first_param_group=true,ture"],
     "give fsdp.prefetch_first_param_group true or false (no cell of the sweep was run)"),
    (["-m", "cuda_graph.impl=none,fulliteration"],
     "set cuda_graph.impl to one of those (no cell of the sweep was run)"),
    (["-m", "model=tiny,huge"], "model=huge: no such option in `model`; pick one of"),
    # null is an optional setting's default, never 0 or ""
    (["model.ffn_hidden_size=0"], "set model.ffn_hidden_size=null or a positive integer"),
    (["fsdp.bucket_size=0"], "set fsdp.bucket_size=null or a positive integer"),
    (["train.checkpoint.dir=''"], "set train.checkpoint.dir=null for its default"),
    # wandb online without credentials (the test's HOME has no .netrc, WANDB_API_KEY is unset)
    (["logging.wandb.mode=online"], "wandb has no credentials for"),
    (["-m", "logging.wandb.mode=online"], "run `wandb login` (or set WANDB_API_KEY)"),
    # a dataset named while the data is mock (it would train on mock data); an empty folder for
    # the run or the sweep (Hydra would write into the current directory)
    (["data.path=/tmp/corpus"], "data.path=/tmp/corpus has no effect with data.kind=mock; set "
                                "data=indexed"),
    (["hydra.run.dir="], "hydra.run.dir is empty"),
    (["-m", "hydra.sweep.dir=''"], "hydra.sweep.dir is empty"),
    # a ${...} that names nothing
    (["model.num_layers=${model.nope}"], "model.num_layers: Interpolation key 'model.nope' not "
                                         "found; fix the ${...} it holds"),
    # a key set where the key that gives it effect is off (launcher/config/effect.py's table)
    (["cuda_graph.warmup_steps=5"], "cuda_graph.warmup_steps=5 has no effect with "
                                    "cuda_graph.impl=none; set cuda_graph.impl=full_iteration"),
    (["profile.ranks=[1]"], "profile.ranks=[1] has no effect with profile.kind=none; set "
                            "profile=torch or profile=nsys"),
    (["model.moe.router_topk=4"], "model.moe.router_topk=4 has no effect with "
                                  "model.moe.num_experts=null; set model.moe.num_experts"),
    (["logging.tensorboard.dir=/tmp/tb"], "has no effect with logging.tensorboard.enabled=false"),
    (["train.min_lr=0.0001"], "train.min_lr=0.0001 has no effect with "
                              "train.lr_schedule=constant; set train.lr_schedule=cosine or linear"),
    (["sweep.tune=true", "sweep.min_repeats=1"], "sweep.tune=true has no effect in a single run "
                                                 "(it configures a sweep); add -m"),
    # hardware files
    (["cluster.gpu=../hardware/h100_sxm", "runtime.dry_run=true"],
     "cluster.gpu=../hardware/h100_sxm is not a name of hardware/ (a file's name, no path); "
     "pick one of b200,"),
    (["cluster.gpu=/etc/hostname", "runtime.dry_run=true"],
     "cluster.gpu=/etc/hostname is not a name of hardware/ (a file's name, no path); pick one "
     "of b200,"),
    # keys that act only where another setting gives them effect (launcher.config.effect)
    (["cluster.gpu=h100_sxm", "runtime.nproc_per_node=1"],
     "cluster.gpu=h100_sxm has no effect with runtime.dry_run=false; set runtime.dry_run=true"),
    (["cluster.kernels=installed"], "cluster.kernels=installed has no effect with "
                                    "runtime.dry_run=false; set runtime.dry_run=true"),
    (["-m", "sweep.pending_limit_min=5"], "sweep.pending_limit_min=5.0 has no effect with "
                                          "hydra/launcher=basic (only a Slurm launcher reads it)"),
    # the no-effect rule judges what the user set: a key set under a governor the user turns off
    (["+recipe=tiny_cpu_text", "data.path=/tmp/corpus", "train.eval_interval=0",
      "train.eval_iters=3"], "train.eval_iters=3 has no effect with train.eval_interval=0"),
    # found before anything is planned: the sweep's own keys and folder, Hydra's flags and
    # folders, a blend weight
    (["-m", "sweep.allow_numerics_change=true"],
     "sweep.allow_numerics_change=true has no effect with sweep.tune=false; set sweep.tune=true"),
    (["-m", "sweep.memory_limit_gib=10"],
     "sweep.memory_limit_gib=10.0 has no effect with sweep.tune=false; set sweep.tune=true"),
    (["-m", "hydra.sweep.dir=/etc/hostname"],
     "hydra.sweep.dir=/etc/hostname cannot be written (/etc/hostname is a file); set "
     "hydra.sweep.dir"),
    (["-m", "hydra.sweep.dir=/tmp/${oc.env:LAUNCH_UNSET_VARIABLE}"],
     "hydra.sweep.dir: KeyError raised while resolving interpolation: \"Environment variable "
     "'LAUNCH_UNSET_VARIABLE' not found\"; fix the ${...} it holds"),
    (["hydra.run.dir=/tmp/${oc.env:LAUNCH_UNSET_VARIABLE}"],
     "hydra.run.dir: KeyError raised while resolving interpolation"),
    (["--cfg=jobs"], "argument --cfg/-c: invalid choice: 'jobs' (choose from 'job', 'hydra', "
                     "'all'); see launch --help"),
    (["data=indexed", "data.path='nan /a 0.5 /b'"],
     "weights and prefixes must alternate, weights positive and finite"),
    # the rendezvous
    (["runtime.rdzv_endpoint=127.0.0.1:99999"],
     "runtime.rdzv_endpoint=127.0.0.1:99999: port 99999 is out of range (1-65535)"),
    # types and magnitudes
    (["fsdp.prefetch_first_param_group=2"], "fsdp.prefetch_first_param_group=2: 2 is not true or "
                                            "false, and would be read as true; give "
                                            "fsdp.prefetch_first_param_group true or false"),
    (["train.steps=1000000000000000000000000000000"],
     "train.steps=1000000000000000000000000000000 is above 2147483647, the most a count may be"),
    # refused by its value before the single run's "has no effect" and before a sweep's schedule
    (["sweep.repeats=1000000000000000000000"],
     "sweep.repeats=1000000000000000000000 is above 1000, the most repeats a sweep runs"),
    (["model.hidden_size=1000000000000000000000000000000"],
     "model.hidden_size=1000000000000000000000000000000 is above 131072"),
    (["runtime.timeout_s=1000000000000000000000000000000"],
     "runtime.timeout_s=1000000000000000000000000000000 is above 604800, 7 days"),
    (["train.lr=nan"], "train.lr=nan is not a finite number; give train.lr a finite number"),
]

# Where a one-cell sweep must answer otherwise than the run, and why
RUN_ONLY = {
    "hydra.run.dir": "a sweep's folder is hydra.sweep.dir (the catalogue has its own entry)",
    "data.split=98,2,0": "the comma that makes the run ambiguous makes a sweep of three cells",
    "sweep.tune=true": "the sweep keys act in a sweep: that is the refusal's point",
    "cluster.gpu=h100_sxm": "a sweep's plan predicts each cell on cluster.gpu: there it acts",
    "cluster.kernels=installed": "a sweep's plan predicts each cell with cluster.kernels",
}


def refuse(folder, overrides):
    """Runs one catalogue command as a user types it, from `folder`; (process, run folder)."""
    run_dir = folder / "run"
    run_dir_override = [] if any(o.startswith("hydra.run.dir") for o in overrides) else [
        f"hydra.run.dir={run_dir}"]
    recipe = [] if any(o.lstrip("+").startswith("recipe=") for o in overrides) else [
        "+recipe=tiny_cpu"]
    flags = [o for o in overrides if o == "-m"]  # before the overrides, as a user types it
    overrides = [o for o in overrides if o != "-m"]
    proc = subprocess.run([LAUNCH, *flags, *recipe, *overrides, *run_dir_override],
                          capture_output=True, text=True, timeout=300, cwd=folder,
                          env={**{k: v for k, v in os.environ.items()
                                  if k not in ("WANDB_API_KEY", "NETRC")},
                               "HOME": str(folder / "home"),
                               "SLURM_CONF": str(folder / "no-slurm.conf")})
    return proc, run_dir


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
    """Every catalogue command's (process, run folder, its folder), two at a time: each is a
    fresh process, mostly imports, and the machine has two cores."""
    folders = [tmp_path_factory.mktemp("bad") for _ in CATALOGUE]
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(refuse, folders, [o for o, _ in CATALOGUE]))
    return [(proc, run_dir, folder) for (proc, run_dir), folder in zip(done, folders)]


@pytest.fixture(scope="module")
def sweep_refusals(tmp_path_factory):
    """Every run of the catalogue again as a one-cell sweep (`launch -m` with the same overrides),
    two at a time."""
    folders = [tmp_path_factory.mktemp("bad_sweep") for _ in CATALOGUE]
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(refuse, folders, [["-m", *o] for o, _ in CATALOGUE]))
    return [proc for proc, _ in done]


def is_run(overrides) -> bool:
    return "-m" not in overrides and not any(k in " ".join(overrides) for k in RUN_ONLY)


@pytest.mark.parametrize("index", [i for i, (o, _) in enumerate(CATALOGUE) if is_run(o)],
                         ids=[" ".join(o)[:60] for o, _ in CATALOGUE if is_run(o)])
def test_a_one_cell_sweep_refuses_what_the_run_refuses(refusals, sweep_refusals, index):
    """One pre-flight (launcher/preflight/check.py) for a run and for each cell of a sweep."""
    run, sweep = refusals[index][0], sweep_refusals[index]
    reason = run.stderr.strip().removeprefix("error: ")
    assert sweep.returncode == 2, sweep.stdout[-1000:] + sweep.stderr[-2000:]
    said = sweep.stderr.strip().splitlines()
    assert len(said) == 1 and reason in said[0], (reason, sweep.stdout[-1000:], said)
    assert "Traceback" not in sweep.stdout + sweep.stderr


@pytest.mark.parametrize("index", range(len(CATALOGUE)),
                         ids=[" ".join(o)[:60] for o, _ in CATALOGUE])
def test_bad_input_is_refused_in_one_line(refusals, index):
    (overrides, expected), (proc, run_dir, folder) = CATALOGUE[index], refusals[index]
    assert proc.returncode == 2, proc.stdout[-1000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and expected in lines[0], lines[0]
    assert FIX.search(lines[0].split(expected)[-1] + expected), lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (run_dir / "summary.json").exists() and not (run_dir / "metrics.jsonl").exists()
    if "-m" in overrides:  # a refused sweep writes nothing at all
        assert not list(folder.glob("multirun")) and not list(folder.glob("sweeps"))
    else:  # nor a refused run: the folder Hydra made for it goes too
        assert not run_dir.exists() and not list(folder.glob("outputs")), list(folder.iterdir())


def test_cuda_asked_for_on_a_machine_without_it(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    proc = subprocess.run([LAUNCH, "+recipe=tiny_cpu", "runtime.device=cuda",
                           f"hydra.run.dir={tmp_path / 'run'}"], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, HOME=str(tmp_path / "home")))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: runtime.device=cuda but no CUDA device is visible; set runtime.device=cpu or auto"]
    assert not (tmp_path / "run" / "summary.json").exists()


def test_fp8_without_transformer_engine_is_refused_before_any_rank(tmp_path):
    if importlib.util.find_spec("transformer_engine") is not None:
        pytest.skip("Transformer Engine is installed here")
    proc, run_dir = refuse(tmp_path, ["+recipe=gpt", "model=tiny", "train.fp8.format=hybrid"])
    assert proc.returncode == 2, proc.stdout[-1000:] + proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        "error: train.fp8.format=hybrid needs Transformer Engine (its FP8 GEMMs; without it "
        "megatron-core trains in bf16), which is not installed; install Transformer Engine, or "
        "set train.fp8.format=null"]
    assert "Traceback" not in proc.stdout and not (run_dir / "summary.json").exists()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A real checkpoint of the tiny model at step 4."""
    root = tmp_path_factory.mktemp("saved")
    subprocess.run([LAUNCH, "+recipe=tiny_cpu", "train.steps=4", "train.checkpoint.interval=4",
                    "logging.wandb.mode=disabled", f"hydra.run.dir={root / 'run'}"],
                   check=True, capture_output=True, timeout=600,
                   env=dict(os.environ, HOME=str(root / "home")))
    return root / "run" / "checkpoints" / "iter_0000004"


def spoil_marker(ckpt):
    (ckpt / "launcher.json").write_text('{"step": 4, "mod')


def drop_metadata(ckpt):
    (ckpt / ".metadata").unlink()


def foreign(ckpt):
    """A DCP folder of neither side: no launcher.json, not named iter_NNNNNNN."""
    (ckpt / "launcher.json").unlink()
    return ckpt.rename(ckpt.parent / "weights")


RESUME_CASES = [
    (spoil_marker, [], "is unreadable or corrupt"),
    (drop_metadata, [], "is incomplete or not a checkpoint (no .metadata); remove it"),
    (foreign, [], "is not a checkpoint of this launcher or of Megatron-LM (no launcher.json, "
                  "not named iter_NNNNNNN)"),
    (None, ["model.hidden_size=128"], "holds a different model (model.hidden_size=64, this run: "
                                      "model.hidden_size=128)"),
    (None, ["runtime.nproc_per_node=2"], "was saved by 1 rank and this run has 2 ranks; resume "
                                         "it with 1 rank (runtime.nproc_per_node x "),
    (None, ["train.steps=4"], "leaves nothing to run; raise train.steps"),
]


@pytest.mark.parametrize("spoil,overrides,expected", RESUME_CASES,
                         ids=[e[:30] for _, _, e in RESUME_CASES])
def test_resume_from_a_corrupt_or_foreign_checkpoint_is_refused(saved, tmp_path, spoil,
                                                                 overrides, expected):
    import shutil

    folder = tmp_path / "ckpts"
    shutil.copytree(saved, folder / saved.name)
    path = spoil(folder / saved.name) if spoil else None
    run_dir = tmp_path / "run"
    proc = subprocess.run([LAUNCH, "+recipe=tiny_cpu", "train.steps=8",
                           f"train.checkpoint.resume={path or 'auto'}",
                           f"train.checkpoint.dir={folder}",
                           *overrides, f"hydra.run.dir={run_dir}"], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, HOME=str(tmp_path)))
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "train.checkpoint" in lines[0], lines
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (run_dir / "summary.json").exists()


def test_a_full_disk_fails_the_checkpoint_and_leaves_none_visible(tmp_path):
    """RLIMIT_FSIZE stands in for a full disk: the writer gets EFBIG, as it would ENOSPC."""
    import resource

    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [LAUNCH, "+recipe=tiny_cpu", "train.steps=6", "train.checkpoint.interval=3",
         "logging.wandb.mode=disabled", f"hydra.run.dir={run_dir}"],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, HOME=str(tmp_path)),
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (300 * 1024, 300 * 1024)))
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "train.checkpoint: step 3 could not be written to" in last
    assert "(File too large); free space there or set train.checkpoint.dir" in last
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not list((run_dir / "checkpoints").glob("iter_*"))
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "error"


def test_an_unreadable_data_index_is_refused_naming_it(tmp_path):
    (tmp_path / "corpus.idx").write_bytes(b"not an index at all")
    (tmp_path / "corpus.bin").write_bytes(b"")
    proc = subprocess.run([LAUNCH, "+recipe=tiny_cpu", "data=indexed",
                           f"data.path={tmp_path / 'corpus'}", f"hydra.run.dir={tmp_path / 'run'}"],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, HOME=str(tmp_path)))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: data.path: {tmp_path / 'corpus.idx'} is not a megatron-core index; prepare the "
        "dataset with `launch-prepare`"]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """The shipped corpus, prepared as a user would."""
    folder = tmp_path_factory.mktemp("data")
    subprocess.run([str(Path(sys.executable).parent / "launch-prepare"), "--stdlib-corpus",
                    "--output", str(folder / "corpus"), "--tokenizer", "byte"], check=True,
                   capture_output=True, timeout=300)
    return folder / "corpus"


def test_an_unwritable_cache_folder_for_real_data_is_refused(prepared, tmp_path):
    proc, run_dir = refuse(tmp_path, ["data=indexed", f"data.path={prepared}",
                                      "data.cache_dir=/etc/hostname/cache"])
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: data.cache_dir=/etc/hostname/cache cannot be written (/etc/hostname is a file); "
        "set data.cache_dir to a writable directory, or null"]
    assert not (run_dir / "summary.json").exists() and not (run_dir / "metrics.jsonl").exists()


def truncate_index(prefix):
    path = Path(f"{prefix}.idx")
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])


def shift_an_offset(prefix):
    path = Path(f"{prefix}.idx")
    data = bytearray(path.read_bytes())
    count = int.from_bytes(data[18:26], "little")
    data[34 + 4 * count + 8] ^= 0x10  # the second sequence's byte offset
    path.write_bytes(bytes(data))


def shorten_bin(prefix):
    path = Path(f"{prefix}.bin")
    path.write_bytes(path.read_bytes()[:-100])


DAMAGED_DATA = [
    (truncate_index, "is truncated or corrupt ("),
    (shift_an_offset, "is corrupt (its lengths, offsets and document bounds do not agree)"),
    (shorten_bin, "the pair does not match, prepare them again together"),
]


@pytest.mark.parametrize("spoil,expected", DAMAGED_DATA, ids=[s.__name__ for s, _ in DAMAGED_DATA])
def test_a_damaged_dataset_is_refused_before_any_rank(prepared, tmp_path, spoil, expected):
    import shutil

    prefix = tmp_path / "corpus"
    for suffix in (".bin", ".idx", ".json"):
        shutil.copy(f"{prepared}{suffix}", f"{prefix}{suffix}")
    spoil(prefix)
    run_dir = tmp_path / "run"
    proc = subprocess.run([LAUNCH, "+recipe=tiny_cpu", "data=indexed", f"data.path={prefix}",
                           f"hydra.run.dir={run_dir}"], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, HOME=str(tmp_path)))
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: data.path: ") and expected in lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (run_dir / "summary.json").exists()


def test_turning_evaluation_off_on_a_recipe_that_sets_it_trains_and_says_so(prepared, tmp_path):
    """The recipe's train.eval_iters is moot under the user's train.eval_interval=0: a note at
    the start, not a refusal."""
    proc, run_dir = refuse(tmp_path, ["+recipe=tiny_cpu_text", f"data.path={prepared}",
                                      "train.eval_interval=0", "train.steps=3",
                                      "train.lr_warmup_steps=1", "logging.wandb.mode=disabled"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "[launch] note: train.eval_iters=4 (not set on the command line) has no effect with " \
           "train.eval_interval=0" in proc.stdout.splitlines()
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "ok"


def test_a_refused_run_leaves_no_folder_and_an_earlier_run_s_folder_is_kept(tmp_path):
    """Hydra makes outputs/DATE/TIME with its config files before the pre-flight: a refusal
    removes it all. A run folder holding an earlier run's outputs is left as it was."""
    proc, _ = refuse_in(tmp_path, ["train.lr=nan"])
    assert proc.returncode == 2 and proc.stderr.startswith("error: train.lr=nan is not a finite")
    assert [p.name for p in tmp_path.iterdir() if p.name != "home"] == []  # no outputs/
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "summary.json").write_text("{}")
    proc, _ = refuse_in(tmp_path, ["train.lr=nan", f"hydra.run.dir={earlier}"])
    assert proc.returncode == 2 and (earlier / "summary.json").read_text() == "{}"


def refuse_in(folder, overrides):
    """`launch +recipe=tiny_cpu OVERRIDES` from `folder`, its run folder Hydra's default
    unless the overrides name one."""
    return refuse(folder, [*overrides] if any(o.startswith("hydra.run.dir") for o in overrides)
                  else [*overrides, "hydra.run.dir=outputs/${now:%Y-%m-%d}/${now:%H-%M-%S}"])
