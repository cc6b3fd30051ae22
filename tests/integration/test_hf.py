"""Hugging Face models in and out, with real transformers and megatron-core: a tiny random Llama
and Qwen3-MoE made here (tests/hf_models.py), imported with `launch-hf import`; the launcher's
GPT (built as a rank builds it, weights from train.init_hf) gives transformers' logits on the
same tokens in fp32; a real `launch` of the imported recipe (bf16, Megatron-FSDP, the base
recipe's ranks: 2 with 2-way expert parallelism for Qwen3-MoE) saves a checkpoint that
`launch-hf export` turns back into the very weights (a step at lr 1e-30 leaves every fp32 main
weight as it was), which transformers loads."""

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import LAUNCH, ROOT
from hf_models import save_tiny

pytestmark = pytest.mark.integration
torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="the hf extra is missing: pip install '.[hf]'")

LAUNCH_HF = str(Path(LAUNCH).parent / "launch-hf")
KEEP_WEIGHTS = ["train.steps=2", "train.lr=1e-30", "train.min_lr=0", "train.weight_decay=0"]


def launch_hf(*args) -> subprocess.CompletedProcess:
    return subprocess.run([LAUNCH_HF, *map(str, args)], capture_output=True, text=True,
                          timeout=600)


def hf_logits(folder, tokens):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    with torch.no_grad():
        return model(tokens).logits


@pytest.fixture(scope="module", params=["llama", "qwen3_moe"])
def imported(request, tmp_path_factory):
    """(kind, the Hugging Face folder, the config dir holding recipe/<kind>.yaml)."""
    tmp = tmp_path_factory.mktemp(request.param)
    folder = save_tiny(request.param, tmp / "hf")
    proc = launch_hf("import", folder, "--recipe", request.param, "--config-dir", tmp / "conf")
    assert proc.returncode == 0, proc.stderr
    return request.param, folder, tmp / "conf"


def relative_logit_difference(kind: str, folder, conf, tmp_path) -> float:
    """max |launcher's logits - transformers'| / max |transformers' logits|, fp32, 2 x 32 tokens."""
    tokens = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(1))
    torch.save(tokens, tmp_path / "tokens.pt")
    proc = subprocess.run([sys.executable, str(ROOT / "tests/integration/hf_logits.py"),
                           str(conf), kind, str(tmp_path / "tokens.pt"),
                           str(tmp_path / "logits.pt")], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ours, theirs = torch.load(tmp_path / "logits.pt"), hf_logits(folder, tokens)
    return ((ours - theirs).abs().max() / theirs.abs().max()).item()


def test_the_launchers_logits_are_transformers(imported, tmp_path):
    kind, folder, conf = imported
    relative = relative_logit_difference(kind, folder, conf, tmp_path)
    print(f"{kind}: max |logit difference| / max |logit| = {relative:.2e}")
    assert relative < 1e-5


LLAMA31_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}


@pytest.mark.parametrize("kind, change", [
    ("llama", {"tie_word_embeddings": True}), ("llama", {"rope_parameters": LLAMA31_ROPE}),
    ("qwen3_moe", {"mlp_only_layers": [0]})], ids=["tied", "llama3.1", "qwen3_moe-dense-first"])
def test_tied_embeddings_rope_scaling_and_dense_layers_give_transformers_logits(tmp_path, kind,
                                                                              change):
    folder = save_tiny(kind, tmp_path / "hf", **change)
    assert launch_hf("import", folder, "--recipe", kind, "--config-dir",
                     tmp_path / "conf").returncode == 0
    relative = relative_logit_difference(kind, folder, tmp_path / "conf", tmp_path)
    print(f"{kind} {change}: max |logit difference| / max |logit| = {relative:.2e}")
    assert relative < 1e-5


def test_without_the_hf_extra_the_launcher_imports_and_export_names_it():
    """transformers and safetensors missing (blocked in sys.modules): every module imports, and
    export refuses in one line naming the extra (megatron's own import warnings come before)."""
    code = ("import sys; sys.modules['transformers'] = sys.modules['safetensors'] = None\n"
            "import launcher.cli, launcher.run.build, launcher.run.hf_export\n"
            "from launcher.hf_cli import main\nsys.exit(main(['export', 'ckpt', 'out']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == ("error: launch-hf export writes safetensors, which is not "
                                   "installed; run pip install '.[hf]'")


def test_a_run_exports_the_weights_it_started_from(imported, tmp_path):
    from safetensors.torch import load_file

    kind, folder, conf = imported
    proc = subprocess.run([LAUNCH, "--config-dir", str(conf), f"+recipe={kind}", *KEEP_WEIGHTS,
                           "train.checkpoint.interval=2", f"train.checkpoint.dir={tmp_path}/ckpt",
                           f"hydra.run.dir={tmp_path}/run"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = launch_hf("export", tmp_path / "ckpt", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    original = load_file(str(folder / "model.safetensors"))
    exported = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert set(exported) == set(original)
    for name, tensor in original.items():  # bf16 on disk, fp32 main weights in the checkpoint
        assert torch.equal(exported[name].to(tensor.dtype), tensor), name
        assert torch.equal(exported[name], tensor.float()), name
    tokens = torch.arange(32).reshape(1, 32)
    assert torch.equal(hf_logits(tmp_path / "out", tokens), hf_logits(folder, tokens))


@pytest.mark.parametrize("change, field", [
    ({"vocab_size": 512}, "model.vocab_size=512"),
    ({"num_attention_heads": 8, "head_dim": 8}, "model.num_attention_heads=8"),
    ({"tie_word_embeddings": True}, "model.untie_embeddings=False"),
])
def test_a_run_of_another_model_is_refused_before_any_rank(tmp_path, change, field):
    """The recipe imported from one model, train.init_hf pointed at another: one line, exit 2."""
    first = save_tiny("llama", tmp_path / "first")
    other = save_tiny("llama", tmp_path / "other", **change)
    assert launch_hf("import", first, "--recipe", "first", "--config-dir",
                     tmp_path / "conf").returncode == 0
    proc = subprocess.run([LAUNCH, "--config-dir", str(tmp_path / "conf"), "+recipe=first",
                           f"train.init_hf={other}", f"hydra.run.dir={tmp_path}/run"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and field in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


IMPORT = ".venv/bin/launch-hf import llama_tiny_hf --recipe llama_hf --config-dir hf_conf"
TRAIN = (".venv/bin/launch --config-dir hf_conf +recipe=llama_hf train.checkpoint.interval=10 "
         "train.checkpoint.dir=llama_hf_ckpt")
EXPORT = ".venv/bin/launch-hf export llama_hf_ckpt llama_hf_out"


def test_the_docs_path_imports_trains_and_exports(doc_command, user_home):
    """docs/checkpoints.md's commands, verbatim and in order: the export loads in transformers
    and holds the trained weights (not the imported ones)."""
    from conftest import doc_commands
    from safetensors.torch import load_file

    commands = doc_commands()
    assert [IMPORT, TRAIN, EXPORT] == [c for c in commands if c in (IMPORT, TRAIN, EXPORT)]
    for command in (IMPORT, TRAIN, EXPORT):
        proc = doc_command(command)
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        assert "Traceback" not in proc.stderr
    out = user_home / "llama_hf_out"
    trained = load_file(str(out / "model.safetensors"))
    started = load_file(str(user_home / "llama_tiny_hf" / "model.safetensors"))
    assert set(trained) == set(started)
    assert not torch.equal(trained["lm_head.weight"], started["lm_head.weight"].float())
    assert torch.isfinite(hf_logits(out, torch.arange(32).reshape(1, 32))).all()
