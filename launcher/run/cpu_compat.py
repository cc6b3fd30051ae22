"""CPU compatibility layer: lets the real megatron-core M-FSDP run on a machine without CUDA.

What it is: megatron-core's Megatron-FSDP, its param/grad buffers, the attention memory buffer and
the RNG tracker call `torch.cuda.*` and allocate on "cuda" unconditionally. This module maps those
calls onto the CPU so the *unmodified* engine runs over gloo, through the same code path a GPU run
takes. It is activated only when the run's device is CPU, before megatron is imported, and never on
a GPU. It changes nothing numerical: every tensor op still runs in torch, on the CPU.

What it covers (see ../shared/FACTS.md):
- a TorchFunctionMode that rewrites CUDA device arguments ("cuda", "cuda:N", an int index,
  torch.device("cuda", N)) to CPU, and turns Tensor.cuda / pin_memory / record_stream into no-ops;
- CPU stand-ins for torch.cuda.current_device, Stream, Event, stream(), current_stream,
  synchronize, empty_cache, memory statistics, nvtx and capture queries.
  torch.cuda.is_available() stays False;
- the CUDA default generator as a generator of its own (`_CudaGenerator`), with the graph-safe
  state API (`graphsafe_get_state`, `graphsafe_set_state`, `clone_state`) that CPU generators
  lack, and megatron's own bindings of `torch.cuda._lazy_call` running their callback at once
  (there is no CUDA to wait for; torch's own are left alone):
  megatron's RNG tracker, plain or graph-safe (`use_cudagraphable_rng`, what a CUDA-graph run
  seeds), saves, forks, restores and converts its states as on a GPU. Without it the tracker's
  state changes were queued for a CUDA initialisation that never comes (and the queue grew by two
  formatted stacks per fork). CPU kernels draw from torch.default_generator, as they always do;
- the same mapping inside the backward of megatron's custom autograd Functions (autograd turns
  torch-function modes off there);
- all_to_all_single's split sizes as lists where megatron's MoE dispatcher hands CPU tensors
  (on a GPU its device-to-host copy turns them into numpy arrays);
- CUDA tensor-type strings ('torch.cuda.FloatTensor') reported for CPU tensors, because
  megatron-core's clip_grads.py and distrib_optimizer.py check types by string.
"""

import contextlib

import torch
from torch.overrides import TorchFunctionMode

_CPU = torch.device("cpu")
_active = None


def _is_cuda_device(value) -> bool:
    if isinstance(value, torch.device):
        return value.type == "cuda"
    if isinstance(value, str):
        return value == "cuda" or value.startswith("cuda:")
    return False


def _to_cpu_device(value):
    return _CPU if _is_cuda_device(value) else value


_DEVICE_ARGS = (str, torch.device)
_NOOP_METHODS = {torch.Tensor.record_stream}
_IDENTITY_METHODS = {torch.Tensor.cuda, torch.Tensor.pin_memory}


class _CudaToCpu(TorchFunctionMode):
    """Rewrites every CUDA device argument of a torch call to the CPU."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _NOOP_METHODS:
            return None
        if func in _IDENTITY_METHODS:
            return args[0]
        if func is torch.Tensor.is_pinned:
            return False
        if func is torch.distributed.all_to_all_single:
            kwargs = _split_sizes_as_lists(kwargs)
        if "device" in kwargs:
            device = kwargs["device"]
            kwargs["device"] = _CPU if isinstance(device, int) else _to_cpu_device(device)
        for arg in args:  # most calls hold tensors only: no new tuple for them (it is per op)
            if isinstance(arg, _DEVICE_ARGS):
                args = tuple(map(_to_cpu_device, args))
                break
        return func(*args, **kwargs)


def _split_sizes_as_lists(kwargs: dict) -> dict:
    """all_to_all_single's split sizes as lists. megatron-core's MoE token dispatcher keeps them
    in tensors and turns them into numpy arrays only where they are on a GPU
    (moe_utils.maybe_move_tensor_to_cpu, its device-to-host copy); torch's binding takes
    sequences of ints, which a CPU tensor is not."""
    return {k: (v.tolist() if k.endswith("_split_sizes") and isinstance(v, torch.Tensor) else v)
            for k, v in kwargs.items()}


class _Stream:
    """Stands in for torch.cuda.Stream: the CPU runs one stream, so everything is already ordered."""

    def __init__(self, *args, **kwargs):
        pass

    def wait_stream(self, other):
        pass

    def wait_event(self, event):
        pass

    def record_event(self, event=None):
        return event or _Event()

    def synchronize(self):
        pass

    def query(self):
        return True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Event:
    """Stands in for torch.cuda.Event; elapsed_time is not measurable this way on a CPU."""

    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None):
        pass

    def wait(self, stream=None):
        pass

    def synchronize(self):
        pass

    def query(self):
        return True


class _Nvtx:
    @staticmethod
    def range_push(msg):
        pass

    @staticmethod
    def range_pop():
        pass

    @staticmethod
    @contextlib.contextmanager
    def range(msg, *args, **kwargs):
        yield

    @staticmethod
    def mark(msg):
        pass


class _CudaGenerator:
    """Stands in for torch.cuda.default_generators[0]. The state it holds is a CPU generator
    object; `graphsafe_set_state` swaps in another one and `graphsafe_get_state` hands out the one
    in use, as a CUDA generator swaps its state objects (what CUDA graphs register)."""

    def __init__(self):
        self._state = torch.Generator()

    def get_state(self):
        return self._state.get_state()

    def set_state(self, state):
        self._state.set_state(state)

    def manual_seed(self, seed):
        self._state.manual_seed(seed)
        return self

    def initial_seed(self):
        return self._state.initial_seed()

    def clone_state(self):
        return self._state.clone_state()

    def graphsafe_get_state(self):
        return self._state

    def graphsafe_set_state(self, state):
        self._state = state


_STREAM = _Stream()
_CUDA_GENERATOR = _CudaGenerator()

_CUDA_STANDINS = {
    "current_device": lambda: 0,
    "device_count": lambda: 1,
    "set_device": lambda device: None,
    "Stream": _Stream,
    "Event": _Event,
    "stream": lambda stream=None: contextlib.nullcontext(),
    "current_stream": lambda device=None: _STREAM,
    "default_stream": lambda device=None: _STREAM,
    "synchronize": lambda device=None: None,
    "empty_cache": lambda: None,
    "get_rng_state": lambda device="cuda": _CUDA_GENERATOR.get_state(),
    "set_rng_state": lambda state, device="cuda": _CUDA_GENERATOR.set_state(state),
    "manual_seed": lambda seed: _CUDA_GENERATOR.manual_seed(seed),
    "manual_seed_all": lambda seed: _CUDA_GENERATOR.manual_seed(seed),  # torch.manual_seed's
    "memory_allocated": lambda device=None: 0,
    "max_memory_allocated": lambda device=None: 0,
    "memory_reserved": lambda device=None: 0,
    "memory_stats": lambda device=None: {},
    "reset_peak_memory_stats": lambda device=None: None,
    "is_current_stream_capturing": lambda: False,
    "nvtx": _Nvtx,
}

_TENSOR_TYPE_NAMES = {
    "torch.FloatTensor": "torch.cuda.FloatTensor",
    "torch.HalfTensor": "torch.cuda.HalfTensor",
    "torch.BFloat16Tensor": "torch.cuda.BFloat16Tensor",
}


def activate() -> None:
    """Installs the layer for the rest of this process. Call before importing megatron."""
    global _active
    if _active is not None:
        return
    if torch.cuda.is_available():
        raise RuntimeError("cpu_compat must not be activated on a machine with CUDA")
    for name, standin in _CUDA_STANDINS.items():
        setattr(torch.cuda, name, standin)
    # megatron's RNG tracker also reaches the RNG functions through torch.cuda.random.
    for name in ("get_rng_state", "set_rng_state", "manual_seed", "manual_seed_all"):
        setattr(torch.cuda.random, name, _CUDA_STANDINS[name])
    torch.cuda.default_generators = (_CUDA_GENERATOR,)

    original_type = torch.Tensor.type

    def tensor_type(self, dtype=None, non_blocking=False, **kwargs):
        if dtype is None:
            name = original_type(self)
            return _TENSOR_TYPE_NAMES.get(name, name)
        return original_type(self, dtype, non_blocking, **kwargs)

    torch.Tensor.type = tensor_type
    _active = _CudaToCpu()
    _active.__enter__()
    _map_in_backward()
    _apply_rng_calls_at_once()


def _map_in_backward() -> None:
    """Torch-function modes are off while autograd runs a backward started by
    torch.autograd.backward, so a custom autograd Function's backward (megatron's _AllToAll
    re-enters its forward, which allocates on torch.cuda.current_device()) would reach CUDA. Each
    one runs inside the mode too: autograd calls its node's `apply`, which BackwardCFunction
    defines for every custom Function. A backward megatron starts itself (its schedule's
    custom_backward, with deallocate_pipeline_outputs, Megatron-LM's setting) runs with the mode
    still on: there a second one would see every op of the Function's backward twice (measured:
    a third of the CPU layer's calls in a tiny run, 2026-12-06), so none is added."""
    from torch.autograd.function import BackwardCFunction
    from torch.overrides import _get_current_function_mode_stack

    original = BackwardCFunction.apply

    def apply_on_cpu(self, *args):
        if any(isinstance(mode, _CudaToCpu) for mode in _get_current_function_mode_stack()):
            return original(self, *args)
        with _CudaToCpu():
            return original(self, *args)

    BackwardCFunction.apply = apply_on_cpu


def _apply_rng_calls_at_once() -> None:
    """megatron-core's RNG functions (its tracker's, and Megatron-FSDP's copy of them) defer
    every state change through torch.cuda._lazy_call until CUDA initialises, which a CPU never
    does, and call torch.cuda._lazy_init first. Their own bindings of those two names run the
    change at once and skip the init; torch's are left as they are."""
    from megatron.core.distributed.fsdp.src.megatron_fsdp import utils as fsdp_utils
    from megatron.core.tensor_parallel import random as tracker

    for module in (tracker, fsdp_utils):
        module._lazy_call = lambda callback, **kwargs: callback()
        module._lazy_init = lambda: None
