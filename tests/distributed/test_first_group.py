"""The first parameter group's all-gather, measured on 2 CPU ranks through the real M-FSDP, on the
gpt recipe shrunk (bf16): where the switch issues it, its size against the model's parameters,
the forward's wait against the all-gather, and the bucket size that changes the group."""

import json

import pytest

from conftest import GPT_TINY, read_run, run_launch

pytestmark = pytest.mark.distributed

TWO_RANKS = [*GPT_TINY, "runtime.device=cpu", "runtime.nproc_per_node=2", "train.steps=8",
             "logging.wandb.mode=disabled"]
BF16 = 2  # bytes per element
HIDDEN, VOCAB, SEQ = 64, 128, 32  # model=tiny (vocab: mock_vocab_size, already a multiple of 128)


def first_group_elements(world: int) -> int:
    """By hand: the tiny GPT's parameters outside its transformer layers (the FSDP units) share
    one bucket: word embeddings (the output layer's too: tied), position embeddings, final
    LayerNorm. M-FSDP pads a bucket to a multiple of dp x the rows' width (dp=2, width 64)."""
    numel = VOCAB * HIDDEN + SEQ * HIDDEN + 2 * HIDDEN
    multiple = world * HIDDEN
    return -(-numel // multiple) * multiple


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    done = {}
    for prefetch in ("true", "false"):
        proc, run_dir = run_launch(tmp_path_factory.mktemp(f"prefetch_{prefetch}"), *TWO_RANKS,
                                   f"fsdp.prefetch_first_param_group={prefetch}")
        assert proc.returncode == 0, proc.stderr[-3000:]
        done[prefetch] = read_run(run_dir)
        done[f"profiled_{prefetch}"] = (run_dir / "profile").exists(), done[prefetch][0]["profile"]
    return done


def test_profiling_off_by_default_writes_no_trace(runs):
    assert runs["profiled_true"] == runs["profiled_false"] == (False, None)


def test_the_switch_moves_the_first_groups_all_gather(runs):
    assert runs["true"][0]["metrics"]["first_group_issued_in"] == "start_param_sync"
    assert runs["false"][0]["metrics"]["first_group_issued_in"] == "forward"
    assert runs["true"][0]["metrics"]["first_group_prefetches"] == 8
    assert runs["false"][0]["metrics"]["first_group_prefetches"] == 0


def test_first_group_bytes_is_the_embedding_bucket_of_the_model(runs):
    for summary, _ in (runs["true"], runs["false"]):
        assert summary["metrics"]["first_group_bytes"] == first_group_elements(2) * BF16 == 20736


def test_without_the_prefetch_the_forward_waits_for_at_most_the_all_gather(runs):
    summary, steps = runs["false"]
    m = summary["metrics"]
    assert m["first_group_samples"] == len(summary["steady_state_steps"]) == 6
    assert 0 < m["first_group_wait_s"] <= m["first_group_allgather_s"]
    for step in steps:  # every step, warm-up included, logs its own pair; a step whose
        # all-gather ended before the forward reached its wait (the peer was late) waited 0
        assert 0 <= step["first_group_wait_s"] <= step["first_group_allgather_s"]


def test_with_the_prefetch_each_step_logs_the_timings_of_an_all_gather_issued_earlier(runs):
    summary, steps = runs["true"]
    m = summary["metrics"]
    assert m["first_group_samples"] == 6 and m["first_group_allgather_s"] > 0
    assert m["first_group_wait_s"] >= 0
    assert all("first_group_wait_s" in s for s in steps)


def test_a_smaller_bucket_size_makes_the_first_group_the_word_embeddings_alone(tmp_path):
    # M-FSDP's BucketingPolicy closes a bucket of non-unit parameters once it holds
    # fsdp.bucket_size elements: the word embeddings (128 x 64 = 8192) fill one by themselves.
    proc, run_dir = run_launch(tmp_path, *TWO_RANKS, "train.steps=4", "fsdp.bucket_size=8192")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["metrics"]["first_group_bytes"] == VOCAB * HIDDEN * BF16 == 16384
    assert summary["config"]["fsdp"]["bucket_size"] == 8192


def test_switching_the_measuring_off_keeps_the_count_and_says_why_the_timings_are_null(tmp_path):
    proc, run_dir = run_launch(tmp_path, *TWO_RANKS, "train.steps=4",
                               "logging.measure_first_group=false")
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads((run_dir / "summary.json").read_text())["metrics"]
    assert m["first_group_prefetches"] == 4
    assert m["first_group_bytes"] == first_group_elements(2) * BF16
    assert m["first_group_wait_s"] is None and m["first_group_allgather_s"] is None
    assert m["first_group_null_reason"] == "logging.measure_first_group=false"
