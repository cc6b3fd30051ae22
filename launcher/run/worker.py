"""One rank of a run, in a fresh process: init, build, train, and (rank 0) write the outputs."""

import dataclasses
import os
import socket
from datetime import timedelta
from typing import Optional

import torch

from launcher import notices
from launcher.run import cpu_compat, crashes, gloo, ranks, record
from launcher.config import Config, as_dict
from launcher.run.environment import RECORDED
from launcher.run.failures import classify_failure
from launcher.summary import RunSummary


def run_rank(cfg: Config, run_dir: str, device_type: str,
             resume_from: Optional[str] = None) -> Optional[RunSummary]:
    """The function every rank runs; returns rank 0's summary (other ranks: None). `resume_from`:
    a checkpoint the launch process found and checked (launcher.run.resume.find_resume)."""
    notices.install()
    me = ranks.layout()
    crash_log = crashes.keep_stacks(run_dir, me.rank)  # a fatal signal leaves every stack there
    try:
        return _run_rank(cfg, run_dir, device_type, resume_from, me)
    finally:
        crashes.disarm(crash_log)


def _run_rank(cfg, run_dir, device_type, resume_from, me) -> Optional[RunSummary]:
    on_cpu = device_type == "cpu"
    if on_cpu:
        # runtime.device=cpu on a GPU machine: this rank sees no GPU (CUDA reads the variable at
        # its first use, not yet made here), so the CPU layer may load; a GPU it saw would
        # make the layer refuse
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        cpu_compat.activate()  # before megatron is imported
        gloo.use_one_worker_per_group()  # torch's gloo races with two (launcher/run/gloo.py)
    if not on_cpu:
        torch.cuda.set_device(me.local_rank)
    torch.distributed.init_process_group("gloo" if on_cpu else "nccl",
                                         timeout=timedelta(seconds=cfg.runtime.timeout_s))
    try:
        summary = _train(cfg, run_dir, me.rank, me.world_size, on_cpu, resume_from)
        # No rank tears its connections down while another is still in a collective (gloo
        # aborts the late rank with SIGABRT when its peer's sockets close under it).
        torch.distributed.barrier()
        return summary
    finally:
        torch.distributed.destroy_process_group()


def gather_ranks(on_cpu: bool) -> tuple:
    """({host: [device of each of its ranks]}, [the environment each rank saw]), gathered from
    every rank: the job's host list, and the variables of launcher.run.environment."""
    mine = (socket.gethostname(), "cpu" if on_cpu else torch.cuda.get_device_name(),
            {name: os.environ.get(name) for name in RECORDED})
    everyone = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(everyone, mine)
    devices = {}
    for host, device, _ in everyone:
        devices.setdefault(host, []).append(device)
    return devices, [env for _, _, env in everyone]


def _train(cfg, run_dir, rank, world_size, on_cpu, resume_from):
    from importlib.metadata import version

    from launcher.run import build, experts, graphs, loop, profile
    from launcher.run.first_group import FirstGroupProbe

    window = profile.window_for(cfg, rank, run_dir)  # memory history: from before the build
    build.init_parallel(cfg.parallel, cfg.fsdp.num_distributed_optimizer_instances,
                        cfg.train.seed, cfg.runtime.timeout_s,
                        graph_safe_rng=cfg.cuda_graph.enabled)
    model, optimizer, scheduler = build_all(cfg, on_cpu)
    probe = FirstGroupProbe(model, timed=cfg.logging.measure_first_group)
    first_step = 1 + (load_checkpoint(resume_from, model, optimizer, scheduler, rank)
                      if resume_from else 0)
    data, valid_data, batch = data_for(cfg, model, first_step, run_dir)
    forward_backward, evaluation = graphs.forward_backward_funcs(
        cfg.cuda_graph, model.config.cuda_graph_use_single_mempool, on_cpu)

    devices, env = gather_ranks(on_cpu)
    writer = Recorder(cfg, run_dir, rank, world_size, on_cpu, first_step)
    if rank == 0:
        print_start(cfg, model, devices, world_size, on_cpu, first_step)
    saver = Saver(cfg, run_dir, model, optimizer, scheduler)

    routing = experts.probe_for(model, cfg, batch.num_microbatches)

    def after_step(step, *measured):
        writer.on_step(step, *measured, first_group=probe.samples.get(step),
                       experts=routing.step_record() if routing else None)
        if cfg.train.eval_interval and (step % cfg.train.eval_interval == 0
                                        or step == cfg.train.steps):
            writer.on_eval(step, loop.evaluate(model, valid_data, batch, cfg.train.eval_iters,
                                               evaluation))
        saver.on_step(step)

    status, summary = "error", None
    try:
        loop.train(model, optimizer, scheduler, data, range(first_step, cfg.train.steps + 1),
                   batch, after_step, forward_backward, cfg.train.inject_nan_at_step, probe,
                   window)
        # megatron.core.__version__ appends the git hash of the *current directory's* repository
        if rank == 0:
            summary = writer.summary(probe, graphs.captured(), version("megatron-core"),
                                     local_shard_numel(model))
            summary = dataclasses.replace(summary, profile=profile.result(
                cfg, run_dir, summary.steps_run, window,
                {step: s.wait_s for step, s in probe.samples.items()}))
        status = "ok"
    except BaseException as err:
        status = classify_failure(1, f"{type(err).__name__}: {err}")  # nan for a NaN stop
        raise
    finally:  # a failed run's dashboards end too, with its status
        writer.close(status, summary)
    if rank != 0:
        return None
    return dataclasses.replace(
        summary, hosts=list(devices), devices_by_host=devices, env=env,
        slurm_job_id=os.environ.get("SLURM_JOB_ID"), wrapper=type(model).__name__,
        cuda_graph_wrapper=graphs.wrapper_name(cfg.cuda_graph),
        num_parameters=sum(p.numel() for p in model.parameters()), resumed_from=resume_from,
        checkpoints=saver.saved)


def build_all(cfg, on_cpu):
    """The M-FSDP-wrapped GPT, its DistributedOptimizer and LR scheduler. With CUDA graphs on,
    the config keeps cuda_graph_impl on a CPU too (the model builds the same); only capture is
    out of a CPU's reach (launcher.run.graphs)."""
    from launcher.run import build, graphs
    from launcher.run.support import layer_spec

    if not on_cpu:  # where megatron.training's pretrain warms its fusions up: before the build
        build.warm_up_fusions(megatron_lm_flags(cfg, on_cpu))
    tconfig = build.transformer_config(cfg.model, cfg.parallel, cfg.cuda_graph, cfg.train,
                                       layer_spec(cfg.model), run_fusions(cfg, on_cpu), on_cpu)
    device = torch.device("cpu") if on_cpu else torch.device("cuda", torch.cuda.current_device())
    ddp = build.ddp_config(cfg.fsdp, cfg.cuda_graph, cfg.train, on_cpu)
    model = build.build_model(cfg.model, cfg.parallel, tconfig, ddp, device,
                              graphs.wrapping_stream(cfg.cuda_graph))
    optimizer, scheduler = build.build_optimizer(model, cfg.train, cfg.fsdp)
    tconfig.grad_scale_func = optimizer.scale_loss
    return model, optimizer, scheduler


def megatron_lm_flags(cfg, on_cpu: bool) -> list:
    """This run as Megatron-LM's flags (launcher.run.megatron_lm)."""
    from launcher.run import megatron_lm
    from launcher.run.support import layer_spec

    return megatron_lm.flags(cfg, run_fusions(cfg, on_cpu), layer_spec(cfg.model), on_cpu)


def run_fusions(cfg, on_cpu: bool):
    """The fused kernels this run uses (launcher.run.fusions)."""
    from launcher.run import fusions
    from launcher.run.support import layer_spec

    return fusions.resolve(cfg.model, layer_spec(cfg.model), cfg.train.precision, on_cpu,
                           fusions.Kernels.here())


def data_for(cfg, model, first_step: int, run_dir: str):
    """This rank's training and validation microbatches (training from `first_step` on), and
    the shape of a step."""
    from megatron.core import parallel_state

    from launcher.run import loop
    from launcher.data.datasets import build_datasets, microbatches

    train, eval_ = cfg.train, cfg.train.eval_interval
    evaluations = train.steps // eval_ + 1 if eval_ else 0
    datasets = build_datasets(
        cfg.data, cfg.model.seq_length, cfg.model.vocab_size, train.seed,
        (train.steps * train.global_batch_size,
         max(evaluations * train.eval_iters * train.global_batch_size, 1)),
        cfg.data.cache_dir or os.path.join(run_dir, "data_cache"))
    dp_size = parallel_state.get_data_parallel_world_size()
    share = (train.micro_batch_size, train.global_batch_size,
             parallel_state.get_data_parallel_rank(), dp_size)
    device = next(model.parameters()).device
    training = microbatches(datasets[0], *share, cfg.data.fixed_batch, device, first_step)
    # validation batch k of the run is the same whichever step the run resumed at
    done = (first_step - 1) // eval_ * train.eval_iters + 1 if eval_ else 1
    validation = microbatches(datasets[1], *share, False, device, done)
    num_microbatches = train.global_batch_size // (train.micro_batch_size * dp_size)
    return training, validation, loop.Batch(num_microbatches, cfg.model.seq_length,
                                            train.micro_batch_size)


def load_checkpoint(path, model, optimizer, scheduler, rank) -> int:
    from launcher.run import checkpoint

    step = checkpoint.load(path, model, optimizer, scheduler)
    if rank == 0:
        print(f"[launch] resumed from {path}: continuing at step {step + 1}", flush=True)
    return step


class Saver:
    """Saves a checkpoint every train.checkpoint.interval steps and at the last step."""

    def __init__(self, cfg, run_dir, model, optimizer, scheduler):
        from launcher.run.resume import checkpoint_dir

        self.cfg, self.objects = cfg, (model, optimizer, scheduler)
        self.folder = checkpoint_dir(cfg.train.checkpoint, run_dir)
        self.saved = []

    def on_step(self, step: int) -> None:
        interval = self.cfg.train.checkpoint.interval
        if not interval or (step % interval and step != self.cfg.train.steps):
            return
        from launcher.run import checkpoint

        os.makedirs(self.folder, exist_ok=True)
        path = checkpoint.save(self.folder, step, *self.objects, self.cfg.model)
        self.saved.append(path)
        if torch.distributed.get_rank() == 0:
            print(f"[launch] checkpoint: {path}", flush=True)


def print_start(cfg, model, devices, world_size, on_cpu, first_step):
    hosts = f" on {len(devices)} hosts" if len(devices) > 1 else ""
    off = run_fusions(cfg, on_cpu).start_line()  # Megatron-LM's fusions this run goes without
    print(f"[launch] {devices[socket.gethostname()][0]} x{world_size}{hosts}, "
          f"{type(model).__name__} ({cfg.fsdp.sharding_strategy.value}), "
          f"prefetch_first_param_group={cfg.fsdp.prefetch_first_param_group}, "
          f"cuda_graph.impl={cfg.cuda_graph.impl.value}"
          + (" through FullCudaGraphWrapper, not captured: a CPU runs it eagerly"
             if cfg.cuda_graph.enabled and on_cpu else "")
          + (f", from step {first_step}" if first_step > 1 else "")
          + (f"; {off}" if off else ""), flush=True)


def local_shard_numel(model) -> int:
    """Elements of the model weights this rank holds (its M-FSDP shard)."""
    buffer = model.param_and_grad_buffer
    total = 0
    for group in buffer.parameter_groups:
        if group.model_weight_buffer is not None:
            total += group.model_weight_buffer.data.numel()
    return total


class Recorder:
    """A rank's recording while it trains (launcher.run.record): every step into its step log,
    and on rank 0, every logging.interval-th step, into the dashboards and the console."""

    def __init__(self, cfg, run_dir, rank, world_size, on_cpu, first_step):
        self.cfg, self.rank, self.on_cpu = cfg, rank, on_cpu
        self.config = as_dict(cfg)  # what the summary and the dashboards record
        self.device_name = None if on_cpu else torch.cuda.get_device_name()
        self.rates = record.Rates.of(
            cfg.model, cfg.train,
            cfg.model.padded_vocab_size(cfg.parallel.tensor_model_parallel_size), world_size,
            self.device_name)
        self.log = record.StepLog(first_step)
        self.dashboards = record.Dashboards(cfg, run_dir, rank, first_step, self.config)

    def on_step(self, step, loss, grad_norm, seconds, lr, first_group=None, experts=None):
        self.log.step(step, loss, seconds)
        if self.rank != 0 or step % self.cfg.logging.interval:
            return
        tps, tflops = self.rates.tokens_per_s(seconds), self.rates.tflops(seconds)
        mfu, timings = self.rates.mfu(tflops), first_group_record(first_group)
        routing = experts or {}
        aux = routing.get("moe_aux_loss")
        self.dashboards.write(
            step,
            {"loss": loss, "grad_norm": _float(grad_norm), "lr": lr, "step_time_s": seconds,
             "tokens_per_s_per_gpu": tps, "tflops_per_gpu": tflops, "mfu": mfu, **timings,
             **routing},
            {"train/loss": loss, "train/grad_norm": _float(grad_norm), "train/lr": lr,
             "perf/step_time_s": seconds, "perf/tokens_per_s_per_gpu": tps,
             "perf/tflops_per_gpu": tflops, "perf/mfu": mfu,
             **{f"perf/{k}": v for k, v in timings.items()},
             **({"train/moe_aux_loss": aux} if aux is not None else {})})
        self._print(f"step {step:>4}/{self.cfg.train.steps}  loss {loss:.4f}  "
                    f"step {seconds * 1e3:7.1f} ms  {tps:9.0f} tokens/s/GPU")

    def on_eval(self, step, loss):
        self.log.valid(step, loss)
        if self.rank != 0:
            return
        self.dashboards.write(step, {"valid_loss": loss}, {"valid/loss": loss})
        self._print(f"step {step:>4}/{self.cfg.train.steps}  validation loss {loss:.4f}")

    def _print(self, line: str) -> None:
        if self.cfg.logging.print_steps is not False:
            print(line, flush=True)

    def close(self, status: str, summary) -> None:
        """Rank 0's dashboards end, with the summary's metrics if the run got that far."""
        self.dashboards.close(status, self.log.last_step(), summary)

    def summary(self, probe, captured, mcore_version, shard_numel) -> RunSummary:
        return record.summary(self.cfg, self.config, self.rates, self.log, probe, captured,
                              self.on_cpu, self.device_name, mcore_version, shard_numel)


def first_group_record(sample) -> dict:
    """A step's first-group timings (launcher.run.first_group), where the step has one."""
    if sample is None:
        return {}
    return {"first_group_allgather_s": sample.allgather_s, "first_group_wait_s": sample.wait_s}


def _float(value):
    return None if value is None else float(value)
