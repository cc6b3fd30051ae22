"""One rank of a run, in a fresh process: init, build, train, and (rank 0) write the outputs."""

import dataclasses
import os
import resource
import socket
from datetime import timedelta
from typing import Optional

import torch

from launcher import notices
from launcher.run import cpu_compat, crashes, gloo, metrics, ranks
from launcher.config import Config, WandbMode, as_dict
from launcher.run.environment import RECORDED
from launcher.run.failures import classify_failure
from launcher.summary import RunMetrics, RunSummary
from launcher.run.outputs import (
    Loggers, MetricsFile, NullLogger, TensorboardLogger, WandbLogger,
)


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

    from launcher.run import build, graphs, loop
    from launcher.run.first_group import FirstGroupProbe

    build.init_parallel(cfg.parallel, cfg.train.seed, cfg.runtime.timeout_s,
                        graph_safe_rng=cfg.cuda_graph.enabled)
    model, optimizer, scheduler = build_all(cfg, on_cpu)
    probe = FirstGroupProbe(model, timed=cfg.logging.measure_first_group)
    first_step = 1 + (load_checkpoint(resume_from, model, optimizer, scheduler, rank)
                      if resume_from else 0)
    data, valid_data, batch = data_for(cfg, model, first_step, run_dir)
    forward_backward, evaluation = graphs.forward_backward_funcs(
        cfg.cuda_graph, model.config.cuda_graph_use_single_mempool, on_cpu)

    devices, env = gather_ranks(on_cpu)
    writer = _Recorder(cfg, run_dir, rank, world_size, on_cpu, first_step)
    if rank == 0:
        print_start(cfg, model, devices, world_size, on_cpu, first_step)
    saver = Saver(cfg, run_dir, model, optimizer, scheduler)

    def after_step(step, *measured):
        writer.on_step(step, *measured, first_group=probe.samples.get(step))
        if cfg.train.eval_interval and (step % cfg.train.eval_interval == 0
                                        or step == cfg.train.steps):
            writer.on_eval(step, loop.evaluate(model, valid_data, batch, cfg.train.eval_iters,
                                               evaluation))
        saver.on_step(step)

    status, summary = "error", None
    try:
        loop.train(model, optimizer, scheduler, data, range(first_step, cfg.train.steps + 1),
                   batch, after_step, forward_backward, cfg.train.inject_nan_at_step, probe)
        # megatron.core.__version__ appends the git hash of the *current directory's* repository
        if rank == 0:
            summary = writer.summary(probe, graphs.captured(), version("megatron-core"),
                                     local_shard_numel(model))
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

    tconfig = build.transformer_config(cfg.model, cfg.parallel, cfg.cuda_graph, cfg.train, on_cpu)
    device = torch.device("cpu") if on_cpu else torch.device("cuda", torch.cuda.current_device())
    ddp = build.ddp_config(cfg.fsdp, cfg.cuda_graph, cfg.train.check_nan_in_grad, on_cpu)
    model = build.build_model(cfg.model, cfg.parallel, tconfig, ddp, device,
                              graphs.wrapping_stream(cfg.cuda_graph))
    optimizer, scheduler = build.build_optimizer(model, cfg.train)
    tconfig.grad_scale_func = optimizer.scale_loss
    return model, optimizer, scheduler


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
    print(f"[launch] {devices[socket.gethostname()][0]} x{world_size}{hosts}, "
          f"{type(model).__name__} ({cfg.fsdp.sharding_strategy.value}), "
          f"prefetch_first_param_group={cfg.fsdp.prefetch_first_param_group}, "
          f"cuda_graph.impl={cfg.cuda_graph.impl.value}"
          + (" through FullCudaGraphWrapper, not captured: a CPU runs it eagerly"
             if cfg.cuda_graph.enabled and on_cpu else "")
          + (f", from step {first_step}" if first_step > 1 else ""), flush=True)


def local_shard_numel(model) -> int:
    """Elements of the model weights this rank holds (its M-FSDP shard)."""
    buffer = model.param_and_grad_buffer
    total = 0
    for group in buffer.parameter_groups:
        if group.model_weight_buffer is not None:
            total += group.model_weight_buffer.data.numel()
    return total


class _Recorder:
    """Per-step metrics: printed and written to metrics.jsonl and wandb on rank 0."""

    def __init__(self, cfg, run_dir, rank, world_size, on_cpu, first_step):
        self.cfg, self.run_dir = cfg, run_dir
        self.config = as_dict(cfg)  # what the summary and the dashboards record
        self.first_step = first_step
        self.rank, self.world_size, self.on_cpu = rank, world_size, on_cpu
        model = cfg.model
        self.tokens_per_step = cfg.train.global_batch_size * model.seq_length
        self.flops = metrics.flops_per_step(
            cfg.train.global_batch_size, model.seq_length, model.hidden_size, model.num_layers,
            model.ffn_size, model.num_attention_heads, model.query_groups,
            model.hidden_size // model.num_attention_heads,
            model.padded_vocab_size(cfg.parallel.tensor_model_parallel_size),
            model.activation.value == "swiglu")
        self.device_name = None if on_cpu else torch.cuda.get_device_name()
        precision = cfg.train.precision.value
        self.peak = metrics.peak_flops(self.device_name, precision)
        self.steps, self.valid_losses, self.rss = [], [], [None, None]
        self.jsonl = self.logger = None
        if rank == 0:
            self.jsonl = MetricsFile(os.path.join(run_dir, "metrics.jsonl"), first_step)
            self.logger = loggers(cfg.logging, run_dir, self.config)

    def on_step(self, step, loss, grad_norm, seconds, lr, first_group=None):
        self.steps.append({"step": step, "loss": loss, "step_time_s": seconds})
        self.rss[len(self.steps) > 1] = metrics.current_rss_bytes()  # [first step, latest]
        if self.rank != 0 or step % self.cfg.logging.interval:
            return
        tps = metrics.tokens_per_s_per_gpu(self.tokens_per_step, seconds, self.world_size)
        tflops = metrics.tflops_per_gpu(self.flops, seconds, self.world_size)
        mfu = metrics.mfu(tflops * 1e12, self.peak)
        record = {"step": step, "loss": loss, "grad_norm": _float(grad_norm), "lr": lr,
                  "step_time_s": seconds, "tokens_per_s_per_gpu": tps, "tflops_per_gpu": tflops,
                  "mfu": mfu, **first_group_record(first_group)}
        self.jsonl.write(record)
        self.logger.log({"train/loss": loss, "train/grad_norm": record["grad_norm"],
                         "train/lr": lr,
                         "perf/step_time_s": seconds, "perf/tokens_per_s_per_gpu": tps,
                         "perf/tflops_per_gpu": tflops, "perf/mfu": mfu,
                         **{f"perf/{k}": v for k, v in first_group_record(first_group).items()}},
                        step=step)
        if self.cfg.logging.print_steps is not False:
            print(f"step {step:>4}/{self.cfg.train.steps}  loss {loss:.4f}  "
                  f"step {seconds * 1e3:7.1f} ms  {tps:9.0f} tokens/s/GPU", flush=True)

    def on_eval(self, step, loss):
        self.valid_losses.append({"step": step, "valid_loss": loss})
        if self.rank != 0:
            return
        self.jsonl.write({"step": step, "valid_loss": loss})
        self.logger.log({"valid/loss": loss}, step=step)
        if self.cfg.logging.print_steps is not False:
            print(f"step {step:>4}/{self.cfg.train.steps}  validation loss {loss:.4f}", flush=True)

    def close(self, status: str, summary) -> None:
        """Ends rank 0's outputs: the summary's metrics (if the run got that far) and its status
        logged at the last step, then metrics.jsonl and every logger closed."""
        if self.rank != 0:
            return
        self.jsonl.close()
        last = self.steps[-1]["step"] if self.steps else self.first_step
        result = dataclasses.asdict(summary.metrics) if summary else {}
        self.logger.log({f"summary/{k}": v for k, v in result.items() if v is not None}, last)
        self.logger.close(status)

    def summary(self, probe, captured, mcore_version, shard_numel):
        from launcher.run.first_group import summarise

        skip = self.first_step - 1 + self.cfg.excluded_steps  # a resumed run warms up again
        steady = [s for s in self.steps if s["step"] > skip]
        times = [s["step_time_s"] for s in steady]
        result = RunMetrics(
            **throughput(self, times),
            **peak_memory(self.on_cpu),
            # memory a step adds (rank 0's RSS after the last step minus after the first, per step)
            rss_growth_bytes_per_step=metrics.growth_per_step(*self.rss, len(self.steps)),
            final_loss=self.steps[-1]["loss"],
            final_valid_loss=self.valid_losses[-1]["valid_loss"] if self.valid_losses else None,
            first_group_prefetches=probe.prefetches,
            **summarise(probe, [s["step"] for s in steady], captured),
            cuda_graph_captured=captured,
        )
        return RunSummary(
            metrics=result, config=self.config, backend="gloo" if self.on_cpu else "nccl",
            world_size=self.world_size, device=self.device_name or "cpu",
            # callbacks torch holds for a CUDA initialisation a CPU run never makes: constant, or
            # memory grows with steps (launcher.run.cpu_compat runs megatron's RNG calls at once)
            torch_cuda_queued_calls=len(torch.cuda._queued_calls) if self.on_cpu else None,
            megatron_core_version=mcore_version, torch_version=torch.__version__,
            steps_run=[s["step"] for s in self.steps],
            steady_state_steps=[s["step"] for s in steady],
            steady_state_step_times_s=times,  # the samples of a sweep's statistics
            tokens_per_step=self.tokens_per_step, flops_per_step=self.flops, peak_flops=self.peak,
            rank0_weight_shard_numel=shard_numel)


def loggers(logging, run_dir: str, config: dict):
    """Rank 0's loggers (launcher.run.outputs): wandb unless disabled, TensorBoard if enabled."""
    chosen = []
    if logging.wandb.mode != WandbMode.disabled:
        chosen.append(WandbLogger(logging.wandb, run_dir, config,
                                  logging.wandb.name or os.path.basename(run_dir)))
    if logging.tensorboard.enabled:
        folder = os.path.join(logging.tensorboard.dir or os.path.join(run_dir, "tb"),
                              logging.tensorboard.name or os.path.basename(run_dir))
        chosen.append(TensorboardLogger(folder, config))
    return Loggers(chosen) if chosen else NullLogger()


def throughput(recorder, times) -> dict:
    """tokens/s/GPU, TFLOP/s/GPU (medians of the per-step rates: metrics.median_per_step), MFU
    and step-time percentiles over the steady-state step times; all null, with the reason, when
    there is none."""
    if not times:
        first, last = recorder.steps[0]["step"], recorder.steps[-1]["step"]
        reason = (f"no steady-state step: steps {first}..{last} all fall within the first "
                  f"{recorder.cfg.excluded_steps} this run leaves out (train.warmup_steps, plus "
                  "CUDA-graph warmup and capture); run more steps to measure throughput")
        return {"tokens_per_s_per_gpu": None, "tflops_per_gpu": None, "mfu": None,
                "step_time_s_p50": None, "step_time_s_p90": None, "throughput_null_reason": reason}
    stats = metrics.step_time_stats(times)
    world = recorder.world_size
    tflops = metrics.median_per_step(
        lambda t: metrics.tflops_per_gpu(recorder.flops, t, world), times)
    return {"tokens_per_s_per_gpu": metrics.median_per_step(
                lambda t: metrics.tokens_per_s_per_gpu(recorder.tokens_per_step, t, world), times),
            "tflops_per_gpu": tflops, "mfu": metrics.mfu(tflops * 1e12, recorder.peak),
            "step_time_s_p50": stats["p50"], "step_time_s_p90": stats["p90"]}


def peak_memory(on_cpu: bool) -> dict:
    """Rank 0's peaks since the end of the first step (launcher.run.loop.train resets them there):
    the CUDA allocator's allocated and reserved bytes (reserved holds a CUDA graph's pool), null on
    a CPU; and the process's max RSS (Linux reports KiB), which counts start-up too."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if on_cpu:
        return {"peak_memory_allocated_bytes": None, "peak_memory_reserved_bytes": None,
                "peak_rss_bytes": rss}
    return {"peak_memory_allocated_bytes": torch.cuda.max_memory_allocated(),
            "peak_memory_reserved_bytes": torch.cuda.max_memory_reserved(), "peak_rss_bytes": rss}


def first_group_record(sample) -> dict:
    """A step's first-group timings (launcher.run.first_group), where the step has one."""
    if sample is None or isinstance(sample, tuple):
        return {}
    return {"first_group_allgather_s": sample.allgather_s, "first_group_wait_s": sample.wait_s}


def _float(value):
    return None if value is None else float(value)
