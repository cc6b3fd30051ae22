"""Config parity: for every recipe at full size, on a GPU with Transformer Engine and on one
without, the launcher's TransformerConfig, DistributedDataParallelConfig and OptimizerConfig
against what Megatron-LM's own path builds from the equivalent flags (the ones
`runtime.print_megatron_lm=true` prints): megatron.training's parse_args and validate_args, then
the builders pretrain uses (core_transformer_config_from_args, get_megatron_ddp_config,
get_megatron_optimizer_config). Configs only, no training.

Every field that differs must be a row of docs/megatron_lm_parity.md's table, and every row must
still differ somewhere: a field megatron adds or changes fails here until it is listed.

What stands in for the GPU here (this machine has none): torch.cuda.get_device_properties answers
sm_90 (validate_args asks it with Megatron-FSDP), and for the Transformer Engine layout megatron's
`rope_utils.fused_apply_rotary_pos_emb`, which Transformer Engine provides, is a placeholder
(TransformerConfig only checks that it exists; nothing is run). Both sides see the same.
"""

import dataclasses
import functools
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from conftest import make_config
from launcher.preflight.check import with_vocab
from launcher.config import LayerSpec
from launcher.preflight import fusions, megatron_lm

pytestmark = pytest.mark.integration

TABLE = Path(__file__).parents[2] / "docs" / "megatron_lm_parity.md"
# recipe (and overrides): the world it is built for
CASES = {"gpt": 8, "gpt_1p3b_1gpu_bf16": 1, "llama3_8b": 8, "llama3_70b": 64, "moe_small": 8,
         "deepseek_v3_proxy": 128,
         "gpt cuda_graph=full_iteration fsdp.prefetch_first_param_group=false": 8,
         "gpt fsdp.prefetch_first_param_group=false": 8,
         # FP8 as the recipes' published rows run it: --fp8-format, --fp8-recipe, and
         # --fp8-param-gather (TransformerConfig.fp8_param and the DDP config's fp8_param_gather)
         "llama3_8b train.fp8.format=hybrid": 8,
         "llama3_8b train.fp8.format=hybrid train.fp8.recipe=tensorwise "
         "train.fp8.param_gather=true": 8,
         "llama3_70b train.fp8.format=e4m3 train.fp8.recipe=blockwise": 64,
         "llama3_70b train.fp8.format=hybrid train.fp8.recipe=mxfp8 "
         "train.fp8.param_gather=true": 64,
         # CPU offloading as Megatron-Bridge's 70B presets run it: --cpu-offloading-num-layers
         "llama3_70b model.recompute.granularity=null model.cpu_offloading_num_layers=40": 64}
LAYOUTS = {"transformer_engine": fusions.Kernels(True, False, False, False),
           "local": fusions.Kernels(False, False, False, False)}
# FP8 and CPU offloading need Transformer Engine: on a GPU without it the run is refused before
# any rank (launcher/preflight/support.py), so those cases are compared on its layout only
NEEDS_TE = ("train.fp8.format", "model.cpu_offloading_num_layers")
PAIRS = [(case, layout) for case in CASES for layout in LAYOUTS
         if layout == "transformer_engine" or not any(key in case for key in NEEDS_TE)]


def listed_differences() -> set:
    """(config, field) of each row of the docs' table."""
    rows = re.findall(r"^\| (\w+) \| `(\w+)` \|", TABLE.read_text(), flags=re.M)
    assert rows, f"no table rows in {TABLE}"
    return set(rows)


def comparable(value):
    """Callables by what they are (functools.partial with its arguments), the rest as they are."""
    if isinstance(value, functools.partial):
        return ("partial", comparable(value.func), tuple(map(comparable, value.args)),
                tuple(sorted((k, comparable(v)) for k, v in value.keywords.items())))
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{value.__module__}.{value.__qualname__}"
    return value


def differences(name, ours, theirs) -> dict:
    out = {}
    for field in dataclasses.fields(theirs):
        a, b = comparable(getattr(ours, field.name)), comparable(getattr(theirs, field.name))
        if not (a == b if not isinstance(a, torch.Tensor) else torch.equal(a, b)):
            out[(name, field.name)] = (a, b)
    return out


def gpu_stand_ins(monkeypatch, te: bool, world: int):
    sm_90 = types.SimpleNamespace(major=9, minor=0, name="sm_90", total_memory=80 << 30,
                                  multi_processor_count=132)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: sm_90)
    if te:
        from megatron.core.models.common.embeddings import rope_utils

        monkeypatch.setattr(rope_utils, "fused_apply_rotary_pos_emb", lambda *a, **k: None)
    monkeypatch.setenv("WORLD_SIZE", str(world))
    monkeypatch.setenv("RANK", "0")


def megatron_lm_configs(flags, monkeypatch):
    from megatron.training.argument_utils import core_transformer_config_from_args
    from megatron.training.arguments import parse_args, validate_args
    from megatron.training.training import get_megatron_ddp_config, get_megatron_optimizer_config

    monkeypatch.setattr(sys, "argv", ["pretrain_gpt.py", *flags])
    args = parse_args()
    validate_args(args)
    return (core_transformer_config_from_args(args), get_megatron_ddp_config(args),
            get_megatron_optimizer_config(args)[0])


def launcher_configs(cfg, resolved):
    from launcher.run import build

    return (build.transformer_config(cfg.model, cfg.parallel, cfg.cuda_graph, cfg.train,
                                     resolved, on_cpu=False),
            build.ddp_config(cfg.fsdp, cfg.cuda_graph, cfg.train, on_cpu=False),
            build.optimizer_config(cfg.train, cfg.fsdp))


def configs_differ(case: str, layout: str, monkeypatch) -> dict:
    world = CASES[case]
    name, *overrides = case.split()
    cfg = with_vocab(make_config(f"+recipe={name}", *overrides))
    spec = LayerSpec(layout)
    resolved = fusions.resolve(cfg.model, spec, cfg.train.precision, False, LAYOUTS[layout])
    gpu_stand_ins(monkeypatch, spec == LayerSpec.transformer_engine, world)
    theirs = megatron_lm_configs(megatron_lm.flags(cfg, resolved, spec, False), monkeypatch)
    ours = launcher_configs(cfg, resolved)
    out = {}
    for kind, a, b in zip(("TransformerConfig", "DistributedDataParallelConfig",
                           "OptimizerConfig"), ours, theirs):
        out.update(differences(kind, a, b))
    return out


@pytest.mark.parametrize("case,layout", PAIRS)
def test_configs_are_megatron_lms_but_for_the_listed_fields(case, layout, monkeypatch):
    unlisted = {k: v for k, v in configs_differ(case, layout, monkeypatch).items()
                if k not in listed_differences()}
    assert not unlisted, (f"{case} ({layout}): fields that differ from Megatron-LM's and are not "
                          f"in {TABLE.name}'s table: {unlisted}")


def test_every_listed_field_still_differs(monkeypatch):
    seen = set()
    for case in ("gpt", "moe_small", "gpt fsdp.prefetch_first_param_group=false"):
        for layout in LAYOUTS:
            with monkeypatch.context() as patch:
                seen |= set(configs_differ(case, layout, patch))
    assert listed_differences() - seen == set(), "rows of the table that no longer differ"


def test_the_start_line_says_which_fusions_a_gpu_without_te_leaves_off():
    cfg = with_vocab(make_config("+recipe=llama3_8b"))
    resolved = fusions.resolve(cfg.model, LayerSpec.local, cfg.train.precision, False,
                               LAYOUTS["local"])
    assert resolved.bias_activation and resolved.bias_dropout  # megatron's own compiled kernels
    assert resolved.start_line() == (
        "fusions off: masked_softmax (needs Apex's scaled_masked_softmax_cuda for bf16); rope "
        "(needs Transformer Engine); gradient_accumulation (needs Transformer Engine, or Apex's "
        "fused_weight_gradient_mlp_cuda); persist_layer_norm (needs Transformer Engine, or Apex)")
    with_te = fusions.resolve(cfg.model, LayerSpec.transformer_engine, cfg.train.precision, False,
                              LAYOUTS["transformer_engine"])
    assert with_te.start_line() == "fusions off: masked_softmax (needs Apex's " \
        "scaled_masked_softmax_cuda for bf16)"


def test_print_megatron_lm_prints_a_command_megatron_parses_and_starts_nothing(tmp_path,
                                                                               monkeypatch):
    import shlex

    from conftest import run_launch

    proc, run_dir = run_launch(tmp_path, "+recipe=llama3_8b_tiny_cpu",
                               "fsdp.prefetch_first_param_group=false",
                               "runtime.print_megatron_lm=true")
    assert proc.returncode == 0, proc.stderr
    assert not (run_dir / "summary.json").exists()
    notes = [line for line in proc.stdout.splitlines() if line.startswith("#")]
    assert any("--prefetch-first-param-group false" in note for note in notes)
    command = "\n".join(line for line in proc.stdout.splitlines() if not line.startswith("#"))
    words = shlex.split(command.replace("\\\n", " "))
    assert words[:4] == ["torchrun", "--nproc-per-node", "2", "pretrain_gpt.py"]
    from megatron.training.arguments import parse_args

    monkeypatch.setattr(sys, "argv", words[3:])
    args = parse_args()
    assert (args.num_layers, args.swiglu, args.bf16, args.hidden_dropout) == (2, True, True, 0.0)
    assert args.distributed_backend == "gloo" and not args.bias_swiglu_fusion


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_the_printed_vocabulary_is_padded_to_the_launchers(tp, monkeypatch):
    """Megatron-LM's tokenizer and padding (build_tokenizer: NullTokenizer, then
    vocab_size_with_padding) from the printed flags give the launcher's padded vocabulary, on
    both sides of each padding boundary (V = k x 128 x TP - 1, + 0, + 1)."""
    from megatron.core.tokenizers.utils.build_tokenizer import build_tokenizer
    from megatron.training.arguments import parse_args

    monkeypatch.setenv("RANK", "0")
    for k in (1, 2, 1002):
        for vocab in (k * 128 * tp - 1, k * 128 * tp, k * 128 * tp + 1):
            cfg = with_vocab(make_config("+recipe=gpt", "runtime.nproc_per_node=8",
                                         f"parallel.tensor_model_parallel_size={tp}",
                                         f"model.vocab_size={vocab}"))
            resolved = fusions.resolve(cfg.model, LayerSpec.local, cfg.train.precision, False,
                                       LAYOUTS["local"])
            flags = megatron_lm.flags(cfg, resolved, LayerSpec.local, False)
            monkeypatch.setattr(sys, "argv", ["pretrain_gpt.py", *flags])
            args = parse_args()
            tokenizer = build_tokenizer(args)
            assert (tokenizer.vocab_size, args.padded_vocab_size) == (
                vocab, cfg.model.padded_vocab_size(tp)), f"vocabulary {vocab}, TP {tp}"


def test_a_gpu_command_is_the_clusters_and_names_what_comes_from_this_machine(tmp_path):
    """runtime.device=cuda prints what a GPU cluster with NVIDIA's PyTorch container runs
    (Transformer Engine layers, every fusion on); cluster.kernels=installed prints this
    installation's, and a `#` line names each flag that comes from it."""
    from conftest import run_launch

    command = ["+recipe=llama3_8b", "runtime.device=cuda", "runtime.nproc_per_node=8",
               "runtime.print_megatron_lm=true"]
    proc, _ = run_launch(tmp_path, *command)
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stdout.splitlines() if line.startswith("#")]
    assert "--transformer-impl transformer_engine" in proc.stdout
    assert "--no-" not in proc.stdout.replace("# ", "").split("pretrain_gpt.py")[1]
    assert any("cluster.kernels=ngc" in note for note in notes)
    here = fusions.Kernels.here()
    proc, _ = run_launch(tmp_path, *command, "cluster.kernels=installed")
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stdout.splitlines() if line.startswith("#")]
    flags = proc.stdout.split("pretrain_gpt.py")[1]
    chosen = [word for word in flags.split() if word.startswith("--no-")]
    if not here.transformer_engine:
        assert "--transformer-impl local" in flags
        chosen.append("--transformer-impl local")
    if not chosen:
        pytest.skip("this installation has Transformer Engine and Apex: no flag comes from it")
    for flag in chosen:
        assert any(note.startswith(f"# {flag}: ") for note in notes), (flag, notes)


def test_print_megatron_lm_under_minus_m_prints_each_cells_command_and_runs_nothing(tmp_path):
    """A sweep prints one command per cell (an invalid cell: its reason) and stops: no job,
    no sweep folder, no report."""
    sweep_dir = tmp_path / "sweep"
    proc = subprocess.run([str(Path(sys.executable).parent / "launch"), "-m", "+recipe=gpt",
                           "model=tiny", "fsdp.prefetch_first_param_group=true,false",
                           "cuda_graph.impl=none,full_iteration",
                           "runtime.print_megatron_lm=true", f"hydra.sweep.dir={sweep_dir}"],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, HOME=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    cells = proc.stdout.split("# cell ")[1:]
    assert len(cells) == 4
    # the last key varies fastest, as in Hydra: (true, none), (true, full_iteration), ...
    assert [c.count("torchrun --nproc-per-node 1 pretrain_gpt.py") for c in cells] == [1, 0, 1, 1]
    assert "invalid, no command: fsdp.prefetch_first_param_group=true cannot be captured" \
        in cells[1]
    assert "--cuda-graph-impl full_iteration" in cells[3]
    assert proc.stdout.strip().endswith("[sweep] runtime.print_megatron_lm=true: 3 command(s); "
                                        "nothing started")
    assert not sweep_dir.exists()
