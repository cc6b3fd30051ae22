"""What megatron's full-iteration path needs from the launcher, on the real megatron-core (CPU
layer on): dict microbatches its StaticBufferLoader takes and the forward step reads, graph-safe
RNG tracker states and their conversion in checkpoints, and the environment a graph run needs."""

import pytest
import torch

from launcher.run import cpu_compat

if torch.cuda.is_available():
    pytest.skip("checks megatron's full-iteration path through the CPU layer, which a CUDA machine "
                "does not load; there tests/gpu captures the graph itself", allow_module_level=True)
cpu_compat.activate()
from megatron.core import parallel_state, tensor_parallel  # noqa: E402
from megatron.core.full_cuda_graph import StaticBufferLoader  # noqa: E402

from launcher.config import ConfigError, CudaGraphConfig, CudaGraphImpl  # noqa: E402
from launcher.data.datasets import MockDataset, microbatches  # noqa: E402
from launcher.run import build, forward, rank_setup  # noqa: E402
from launcher.run.checkpoint import tracker_states_to_load, tracker_states_to_save  # noqa: E402
from launcher.preflight.environment import GRAPH_DEFAULTS, run_environment  # noqa: E402

GRAPHS = CudaGraphConfig(impl=CudaGraphImpl.full_iteration)
EAGER = CudaGraphConfig()


def first_microbatch():
    data = microbatches(MockDataset(1, seq_length=8, vocab_size=50), micro_batch_size=2,
                        global_batch_size=4, dp_rank=0, dp_size=1, fixed_batch=False,
                        device=torch.device("cpu"))
    return next(data)


class Recorder(torch.nn.Module):
    """Stands in for the GPT only to see what the forward step hands it."""

    def forward(self, tokens, position_ids, attention_mask, labels):
        self.seen = (tokens, position_ids, attention_mask, labels)
        return torch.ones(labels.shape)


def test_microbatches_are_dicts_the_forward_step_reads():
    batch = first_microbatch()
    assert set(batch) == {"tokens", "labels", "loss_mask", "position_ids"}
    model = Recorder()
    _, loss_func = forward.forward_step(poison=False)(iter([batch]), model)
    tokens, positions, mask, labels = model.seen
    assert tokens is batch["tokens"] and labels is batch["labels"] and mask is None
    assert positions is batch["position_ids"]
    assert torch.equal(positions[1], torch.arange(8))
    loss, _ = loss_func(torch.ones(2, 8))
    assert loss.item() == 1.0  # the mean over the loss mask's tokens


def test_megatron_static_buffer_loader_takes_them():
    batch = first_microbatch()
    StaticBufferLoader.static_buffers["training"].clear()
    static = StaticBufferLoader()(batch, "training", 0)
    assert set(static) == set(batch) and static is not batch
    assert all(torch.equal(static[k], batch[k]) for k in batch)
    again = first_microbatch()
    assert StaticBufferLoader()(again, "training", 0) is static  # the same buffers, refilled
    StaticBufferLoader.static_buffers["training"].clear()


@pytest.fixture
def rng_ranks():
    for setter in (parallel_state.set_tensor_model_parallel_rank,
                   parallel_state.set_expert_model_parallel_rank,
                   parallel_state.set_expert_tensor_parallel_rank):
        setter(0)
    yield
    rank_setup.seed_rngs(0, graph_safe_rng=False)


def test_graph_impl_seeds_a_graph_safe_tracker(rng_ranks):
    rank_setup.seed_rngs(1234, graph_safe_rng=True)
    tracker = tensor_parallel.get_cuda_rng_tracker()
    states = tracker.get_states()
    assert states and all(isinstance(s, torch.Generator) for s in states.values())
    assert tensor_parallel.is_graph_safe_cuda_rng_tracker(tracker)
    with tracker.fork():  # what attention's dropout does each forward
        pass
    rank_setup.seed_rngs(1234, graph_safe_rng=False)
    plain = tensor_parallel.get_cuda_rng_tracker().get_states()
    assert all(isinstance(s, torch.Tensor) for s in plain.values())


def test_checkpoint_rng_states_convert_both_ways(rng_ranks):
    rank_setup.seed_rngs(77, graph_safe_rng=False)
    plain = tensor_parallel.get_cuda_rng_tracker().get_states()
    rank_setup.seed_rngs(77, graph_safe_rng=True)
    graph_safe = tensor_parallel.get_cuda_rng_tracker().get_states()
    saved = tracker_states_to_save(graph_safe)
    assert saved.keys() == plain.keys()
    assert all(torch.equal(saved[k], plain[k]) for k in plain)  # the same seeds, as tensors
    loaded = tracker_states_to_load(saved, graph_safe=True)
    assert all(isinstance(v, torch.Generator) for v in loaded.values())
    for name, generator in loaded.items():
        assert torch.equal(generator.get_state(), plain[name])
        assert torch.equal(torch.rand(4, generator=generator),
                           torch.rand(4, generator=graph_safe[name]))
    assert tracker_states_to_load(saved, graph_safe=False) == saved


def test_graph_run_gets_the_full_iteration_environment():
    assert run_environment(GRAPHS, {}) == GRAPH_DEFAULTS
    assert run_environment(EAGER, {}) == {}


def test_compatible_user_values_are_kept():
    mine = {"CUDA_DEVICE_MAX_CONNECTIONS": "8", "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64",
            "NCCL_GRAPH_REGISTER": "0"}
    added = run_environment(GRAPHS, mine)
    assert not set(added) & set(mine)
    assert added == {"TORCH_NCCL_AVOID_RECORD_STREAMS": "0"}


@pytest.mark.parametrize("cuda_graph,environ,message", [
    (EAGER, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
     r"CUDA_DEVICE_MAX_CONNECTIONS=1 serialises Megatron-FSDP's communication .* set it above 1"),
    (GRAPHS, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, r"CUDA_DEVICE_MAX_CONNECTIONS=1 serialises"),
    (EAGER, {"CUDA_DEVICE_MAX_CONNECTIONS": "many"},
     r"CUDA_DEVICE_MAX_CONNECTIONS=many is not a positive integer"),
    (GRAPHS, {"NCCL_GRAPH_REGISTER": "1"},
     r"NCCL_GRAPH_REGISTER=1 breaks NCCL inside a full-iteration CUDA graph capture .* set it to 0"),
    (GRAPHS, {"TORCH_NCCL_AVOID_RECORD_STREAMS": "1"},
     r"TORCH_NCCL_AVOID_RECORD_STREAMS=1 breaks NCCL inside a full-iteration CUDA graph"),
    (GRAPHS, {"PYTORCH_CUDA_ALLOC_CONF": "graph_capture_record_stream_reuse:False"},
     r"turns off graph_capture_record_stream_reuse, which full-iteration CUDA graph capture needs"),
])
def test_incompatible_environment_is_refused(cuda_graph, environ, message):
    with pytest.raises(ConfigError, match=message):
        run_environment(cuda_graph, environ)


def test_eager_runs_leave_graph_variables_alone():
    assert run_environment(EAGER, {"NCCL_GRAPH_REGISTER": "1"}) == {}


def test_several_ranks_of_a_node_get_one_thread_each_as_torchrun_gives_them():
    assert run_environment(EAGER, {}, ranks_per_node=2) == {"OMP_NUM_THREADS": "1"}
    assert run_environment(EAGER, {"OMP_NUM_THREADS": "4"}, ranks_per_node=2) == {}
    assert run_environment(EAGER, {}, ranks_per_node=1) == {}
