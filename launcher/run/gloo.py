"""Gloo process groups with one worker thread each: the CPU path's guard against a heap race in
torch's ProcessGroupGloo (torch 2.11; docs/crashes.md has the evidence and the reproducer).

The race: every gloo process group runs its collectives on a pool of worker threads (two per
device, `ProcessGroupGloo::Options::threads`), and each worker, after a collective completes,
writes the group's status (`pgStatus_->lastCompletedWorkName = opTypeToString(...)`, in
`ProcessGroupGloo::runLoop`) outside the lock that guards the queue. Two workers that finish
together move-assign the same std::string at once. For names longer than the string's inline
buffer ("ALLGATHER_COALESCED": 19 characters, a 32-byte heap chunk) both free the old buffer and
one writes into it after the other freed it: a double free into the workers' malloc caches, seen as
SIGSEGV or "malloc(): unaligned tcache chunk detected" at a later allocation. Megatron-FSDP keeps
several coalesced all-gathers of one group in flight (its prefetch), so both workers of the group
are busy at once: 1 rank died in about 9,000 CPU training steps, and the minimal reproducer
(bench/gloo_race.py) dies within seconds.

With one worker per group, one thread writes the status: no race. Collectives of a group then run
one after another, as NCCL's do on their stream; nothing numerical changes. torch's own
`new_group` takes no gloo options (distributed_c10d._new_process_group_helper builds gloo with
its defaults), so the launcher swaps the class that helper constructs for one that passes them.
GPU runs (NCCL) are left alone.
"""

import os

import torch.distributed.distributed_c10d as c10d
from torch.distributed import ProcessGroupGloo

WORKER_THREADS = 1
_TORCH_INIT = ProcessGroupGloo.__init__


def _init_with_one_worker(self, store, rank, size, timeout=c10d.default_pg_timeout):
    """ProcessGroupGloo(store, rank, size, timeout) as torch builds it (its devices from
    GLOO_SOCKET_IFNAME, or the default device; its timeout), with one worker thread instead of two
    per device. A call that passes its own options keeps them."""
    if isinstance(timeout, ProcessGroupGloo._Options):
        return _TORCH_INIT(self, store, rank, size, timeout)
    options = ProcessGroupGloo._Options()
    options._timeout = timeout
    options._devices = _devices()
    options._threads = WORKER_THREADS
    return _TORCH_INIT(self, store, rank, size, options)


def _devices() -> list:
    interfaces = [name for name in os.environ.get("GLOO_SOCKET_IFNAME", "").split(",") if name]
    if interfaces:
        return [ProcessGroupGloo.create_device(interface=name) for name in interfaces]
    return [ProcessGroupGloo.create_default_device()]


def use_one_worker_per_group() -> None:
    """Every gloo group this process creates from now on (init_process_group, new_group) gets one
    worker thread. Call before init_process_group. The class itself is kept (torch checks
    backends with isinstance); only its constructor's default options change."""
    ProcessGroupGloo.__init__ = _init_with_one_worker
