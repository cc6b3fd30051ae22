"""Full-iteration CUDA graphs, through megatron-core's FullCudaGraphWrapper as Megatron-LM's
training loop uses it (megatron/training/training.py: train() and evaluate() wrap the schedule
when cuda_graph_impl == "full_iteration"; get_model() wraps the model with DDP/FSDP on
get_shared_capture_stream(), so autograd's retained AccumulateGrad nodes belong to the stream
the graph is captured on).

The wrapper copies every microbatch into static buffers (it needs dict microbatches), runs
`cuda_graph.warmup_steps` calls eagerly, captures on the next call, and replays after that; its
state lives on the class, per stage (`training`, `validation`). On a CPU the same wrapper runs
every call eagerly, because capture is never reached: the data path, the RNG tracker and the step
bookkeeping are the GPU run's, and the summary says the graph was not captured.
"""

import contextlib

import torch
from megatron.core.full_cuda_graph import FullCudaGraphWrapper, get_shared_capture_stream
from megatron.core.pipeline_parallel import get_forward_backward_func

from launcher.config import CudaGraphConfig

NEVER = 2**62  # a warm-up no CPU run reaches: a CPU cannot capture a CUDA graph


def forward_backward_funcs(cuda_graph: CudaGraphConfig, use_single_mempool: bool, on_cpu: bool):
    """(training, evaluation) forward/backward functions: megatron's schedule, or with graphs on
    one FullCudaGraphWrapper each (Megatron-LM builds evaluation's own)."""
    if not cuda_graph.enabled:
        return get_forward_backward_func(), get_forward_backward_func()
    warmup = NEVER if on_cpu else cuda_graph.warmup_steps
    return tuple(FullCudaGraphWrapper(get_forward_backward_func(), cuda_graph_warmup_steps=warmup,
                                      use_single_mempool=use_single_mempool) for _ in range(2))


def wrapper_name(cuda_graph: CudaGraphConfig):
    return FullCudaGraphWrapper.__name__ if cuda_graph.enabled else None


def captured() -> bool:
    """Whether the training graph was captured, read from the wrapper's own state (as Megatron-LM's
    train_step reads it), not from the config."""
    return FullCudaGraphWrapper.cuda_graph.get("training") is not None


@contextlib.contextmanager
def wrapping_stream(cuda_graph: CudaGraphConfig):
    """The stream the model is wrapped on: the shared capture stream with graphs on, else a side
    stream, each ordered after the current one, as Megatron-LM's get_model()."""
    stream = get_shared_capture_stream() if cuda_graph.enabled else torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        yield
    torch.cuda.current_stream().wait_stream(stream)
