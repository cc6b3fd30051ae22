"""One rank of a run, in a fresh process: the CPU layer where it runs on a CPU, the process group,
then the Trainer (launcher.run.trainer) builds and trains, and rank 0 returns the summary."""

import os
from datetime import timedelta
from typing import Optional

import torch

from launcher import notices
from launcher.config import Config
from launcher.run import cpu_compat, crashes, gloo
from launcher.preflight import ranks
from launcher.summary import RunSummary


def run_rank(cfg: Config, run_dir: str, device_type: str,
             resume_from: Optional[str] = None) -> Optional[RunSummary]:
    """The function every rank runs; returns rank 0's summary (other ranks: None). `resume_from`:
    a checkpoint the launch process found and checked (launcher.preflight.resume.find_resume)."""
    notices.install()
    layout = ranks.layout()
    crash_log = crashes.keep_stacks(run_dir, layout.rank)  # a fatal signal leaves every stack there
    try:
        return _run_rank(cfg, run_dir, device_type, resume_from, layout)
    finally:
        crashes.disarm(crash_log)


def _run_rank(cfg, run_dir, device_type, resume_from, layout) -> Optional[RunSummary]:
    on_cpu = device_type == "cpu"
    if on_cpu:
        # runtime.device=cpu on a GPU machine: this rank sees no GPU (CUDA reads the variable at
        # its first use, not yet made here), so the CPU layer may load; a GPU it saw would
        # make the layer refuse
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        cpu_compat.activate()  # before megatron is imported
        gloo.use_one_worker_per_group()  # torch's gloo races with two (launcher/run/gloo.py)
    if not on_cpu:
        torch.cuda.set_device(layout.local_rank)
    torch.distributed.init_process_group("gloo" if on_cpu else "nccl",
                                         timeout=timedelta(seconds=cfg.runtime.timeout_s))
    try:
        from launcher.run.trainer import Trainer  # imports megatron: after the CPU layer

        summary = Trainer(cfg, run_dir, layout, on_cpu, resume_from).train()
        # No rank tears its connections down while another is still in a collective (gloo
        # aborts the late rank with SIGABRT when its peer's sockets close under it).
        torch.distributed.barrier()
        return summary
    finally:
        torch.distributed.destroy_process_group()
