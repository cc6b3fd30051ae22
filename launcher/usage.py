"""`launch --help`: what launch does, its everyday commands, each recipe with its purpose, and the
config groups, read from the shipped files (no composition: Hydra's own help composes the
config repository again for every group it lists, about 2 s here; this takes none of that).
Hydra's flags stay behind `launch --hydra-help`."""

from importlib import resources

COMMANDS = (
    ("launch +recipe=gpt fsdp.prefetch_first_param_group=false",
     "one run: the GPT-2-small-class recipe, bf16 on a GPU"),
    ("launch -m +recipe=gpt fsdp.prefetch_first_param_group=true,false "
     "cuda_graph.impl=none,full_iteration",
     "a sweep of the switch against CUDA graphs; writes results and report.html"),
    ("launch +recipe=gpt model=tiny train.precision=fp32 train.steps=5",
     "the same recipe shrunk for a CPU (real Megatron-FSDP over gloo)"),
    ("launch -m +recipe=sweep_tiny_cpu",
     "the sweep's grid on the tiny model, on a CPU: about a minute on 2 cores"),
    ("launch +recipe=llama3_8b runtime.nproc_per_node=8",
     "Llama 3 8B on the 8 GPUs of one node, a rank each"),
    ("launch +recipe=llama3_8b cluster.gpu=h100_sxm runtime.nproc_per_node=8 "
     "runtime.dry_run=true",
     "that run predicted on 8 H100s (step time, MFU, memory, the switch's saving); starts "
     "nothing"),
)


def purpose(text: str) -> str:
    """A recipe's one-line purpose: its first comment after Hydra's package line."""
    for line in text.splitlines():
        if line.startswith("#") and not line.startswith("# @package"):
            return line.lstrip("# ").strip()
    return ""


def recipes() -> list:
    """(name, purpose) of every shipped recipe, by name."""
    files = sorted(p for p in resources.files("launcher.recipes").iterdir()
                   if p.name.endswith(".yaml"))
    return [(p.name[:-5], purpose(p.read_text())) for p in files]


def groups() -> list:
    """(group, [option, ...]) of the shipped config groups, Hydra's own left out."""
    found = []
    for folder in sorted(resources.files("launcher.conf").iterdir(), key=lambda p: p.name):
        if folder.is_dir() and folder.name not in ("hydra", "__pycache__"):
            options = sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))
            found.append((folder.name, options))
    return found


def text() -> str:
    width = max(len(name) for name, _ in recipes())
    lines = [
        "launch: trains a megatron-core GPT wrapped in the real Megatron-FSDP, configured with "
        "Hydra.",
        "Its switch, fsdp.prefetch_first_param_group, decides whether M-FSDP all-gathers the "
        "first",
        "parameter group in the optimizer step (start_param_sync), ahead of the next forward. On "
        "a GPU",
        "the launcher's per-step sync point waits for that prefetch, so it saves little or "
        "nothing (a",
        "dry run with cluster.gpu prints the predicted saving); on a CPU (gloo) it overlaps the "
        "host's",
        "work between steps. Off is what lets a full-iteration CUDA graph capture. Every setting "
        "is",
        "checked before any rank starts; sweeps compare them.",
        "",
    ]
    for command, what in COMMANDS:
        lines += [f"  {command}", f"      {what}"]
    lines += ["", "Recipes (+recipe=NAME, then any override on top):"]
    lines += [f"  {name:<{width}}  {line}" for name, line in recipes()]
    lines += ["", "Config groups (GROUP=OPTION):"]
    lines += [f"  {group}: {', '.join(options)}" for group, options in groups()]
    lines += [
        "",
        "Models: GPT-2 style (tiny, gpt2_small), Llama 3 (llama3_8b, llama3_70b), mixtures of",
        "experts (moe_small, deepseek_v3_proxy; model.moe.*). Each model recipe has a CPU twin,",
        "RECIPE_tiny_cpu (the gpt recipe's is tiny_cpu). On megatron-core's local spec (no",
        "Transformer Engine) the experts run as SequentialMLP, one GEMM per expert, no grouped",
        "GEMM; its MoE cannot be captured in a full-iteration graph.",
        "",
        "More:",
        "  launch --cfg job [OVERRIDES]        every key of the resolved config (imports no torch)",
        "  launch ... runtime.dry_run=true     the checks, and the plan or estimate; starts nothing",
        "  launch -m ... hydra/launcher=slurm  jobs on Slurm (one job where nothing is swept)",
        "  launch --hydra-help                 Hydra's own flags",
        "README.md tells the rest; each key's meaning is its docstring in launcher/config/.",
    ]
    return "\n".join(lines)
