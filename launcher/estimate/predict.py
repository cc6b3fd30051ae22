"""The dry run's time model: one step of a run on a named cluster (`cluster.gpu`, hardware/),
before any rank starts. Arithmetic only, beside the memory estimate (launcher/estimate/memory.py).

What it follows (megatron-core 0.19.2's Megatron-FSDP, megatron_fsdp.py and
param_and_grad_buffer.py):
- Buckets (launcher/estimate/param_groups.py): the parameters outside the transformer layers (embeddings,
  the final norm, an untied output layer) in buckets of the size Megatron-LM's get_model gives
  (Llama-3 8B: the embeddings, then the final norm and output layer), the first of them the
  first parameter group; they stay gathered for the step. Each layer is one group (fsdp unit),
  its routed experts a group of their own over the expert data-parallel ranks. Each collective moves
  the whole bucket (padding left out): an all-gather in the weights' dtype, a reduce-scatter in
  the main gradients' (fsdp.grad_comm_dtype, else main_grads_dtype, else the weights' dtype).
- optim_grads_params gathers every layer in the forward and again in the backward (released
  after each use), each hook prefetching the next buckets while those it added hold fewer than
  half of suggested_communication_unit_size elements (at least one; with fsdp.double_buffer at
  most one layer ahead, and none from a bucket outside the layers); the first group stays
  gathered for the step. Its default is twice the mean
  layer bounded by 1e9 elements the way the installed megatron-core bounds it
  (launcher/estimate/communication_unit.py): at least 1e9 in 0.19.2, at most 1e9 on Megatron-LM's
  main since PR #7134 (unreleased). Each layer's gradients are reduce-scattered once its
  backward is done, every microbatch.
  optim and optim_grads gather once per step; optim reduces once, after the last microbatch.
- The switch: on, the optimizer step's start_param_sync gathers the first group and the prefetch
  window behind it; off, the first forward gathers the first group alone and waits for it,
  then the first layer gathers its own bucket and the window.
- Collectives share one channel, in the order they are issued: t = latency + (n-1)/n x bytes /
  bandwidth over n ranks. On a GPU, NVLink's bandwidth x bus_fraction inside the NVLink domain
  (a DGX node's ranks, or an NVL72 rack); across domains the NICs of a domain's ranks together,
  one per GPU, x nic_fraction, never more than NVLink's. On a CPU, gloo's measured figures.
- Compute: on a GPU, by kernel class (launcher/estimate/kernels.py: GEMMs by shape, attention by
  sequence length, memory-bound kernels by bytes, kernel launches behind which the kernels run,
  gone under a full-iteration CUDA graph), every rate at `Cluster.end` of its band; on a CPU,
  Megatron-LM's model FLOPs (launcher/estimate/flops.py) at the measured matmul rate (with fp8, the
  core attention at bf16's) plus the host's measured time per layer, ranks beyond its cores
  sharing them. A full recomputation repeats the forward of the recomputed layers; tensor
  parallelism splits a layer's compute over its ranks and adds its all-reduces (no sequence
  parallelism: each an all-gather's and a reduce-scatter's time). CPU offloading (model.cpu_offloading_num_layers) copies each
  offloaded layer's activations (launcher/estimate/memory.py) to the host in the forward and back
  in the backward at the GPU's host link (`host_link_gbps`), each copy beside the next layer's
  compute: an offloaded layer takes the longer of its compute and its copy, each way.
- The optimizer step streams the local shard's fp32 weights, gradients and both moments in
  and out of memory once. The step ends with the launcher's sync point: on a GPU
  torch.cuda.synchronize waits for the prefetch the switch issued, so on a GPU the switch saves
  only what the first forward would otherwise wait for beyond that; on a CPU (gloo) the host goes
  on, and the prefetch overlaps the host's work between steps (`step_host_us`).
Left out: padding, MoE load imbalance, pipeline and context parallelism, HSDP's outer
reduction, NCCL's kernels taking SMs from the compute they overlap and its sharing of the links
between an all-gather and a reduce-scatter in flight together (docs/prediction.md).
"""

from dataclasses import dataclass, replace
from typing import List, Optional, Tuple

from launcher.config import (
    Activation, Config, ConfigError, CudaGraphImpl, Precision, RecomputeGranularity,
    ShardingStrategy, check_world_size,
)
from launcher.config.cluster import Hardware
from launcher.config.world import World, resolve_world
from launcher.estimate.communication_unit import communication_unit
from launcher.estimate.memory import (
    gradient_dtypes, layer_activation_bytes, layer_parameters, memory_per_gpu, memory_spec,
    padded_vocab,
)
from launcher.estimate.kernels import Gemm, gemm_s, hbm_rate, host_link_rate, layer_s
from launcher.estimate.param_groups import parameter_groups
from launcher.estimate.flops import flops_per_step
from launcher.estimate.topology import Cluster

GIB = 2**30


@dataclass(frozen=True)
class Unit:
    """One of Megatron-FSDP's fsdp units or buckets as a step sees it: its parameters, the
    seconds of its collectives and of its compute per microbatch."""

    name: str
    params: int
    allgather_s: float
    reduce_s: float
    forward_s: float
    backward_s: float
    resident: bool = False
    """A bucket outside the FSDP units (embeddings, final norm, output layer): gathered once a
    step and kept; its compute is the logits'."""


@dataclass(frozen=True)
class Timeline:
    """One step as the simulation ran it."""

    step_s: float
    compute_s: float
    optimizer_s: float
    first_wait_s: float
    """How long the first forward waits for the first group."""
    tail_s: float
    """The switch's prefetch waited at the step's end (a GPU's sync point)."""


@dataclass(frozen=True)
class Prediction:
    """One step of the run, per GPU, and the switch's saving."""

    units: List[Unit]
    timeline: Timeline
    tokens_per_s_per_gpu: float
    tflops_per_gpu: float
    mfu: float
    memory_gib: float
    saving_s: Optional[float]
    """Step time with the switch off minus with it on (positive: on is faster); None where one
    of the two settings cannot run."""
    why: str


def weight_bytes(cfg: Config) -> int:
    return 2 if cfg.train.precision == Precision.bf16 else 4


def grad_bytes(cfg: Config) -> int:
    """Bytes a gradient element takes in the reduce-scatter (estimate.gradient_dtypes)."""
    return gradient_dtypes(cfg).comm_bytes


def layer_flops(cfg: Config, moe: int) -> float:
    """Model FLOPs (forward and backward) of one layer for one microbatch, as Megatron-LM counts
    them (launcher/estimate/flops.py: flops_per_step is the layers' sum plus the logits)."""
    m = cfg.model
    h, s = m.hidden_size, m.seq_length
    q, k = m.head_channels * m.num_attention_heads, m.head_channels * m.query_groups
    gates = 3 if m.activation == Activation.swiglu else 2
    width = (m.expert_ffn_size * m.moe.router_topk + (m.moe.shared_expert_ffn_hidden_size or 0)
             if moe else m.ffn_size)
    per_token = 3 * 2 * (h * gates * width + h * (q + 2 * k) + q * s / 2 * 2 + q * h)
    return per_token * s * cfg.train.micro_batch_size


def logits_flops(cfg: Config) -> float:
    m = cfg.model
    return 3 * 2 * m.hidden_size * padded_vocab(cfg) * m.seq_length * cfg.train.micro_batch_size


def units_of(cfg: Config, cluster: Cluster, math: str) -> List[Unit]:
    """The step's units in Megatron-FSDP's bucket order: the buckets outside the layers
    (launcher/estimate/param_groups.py; the last carries the logits' compute), then the layers; without
    fsdp units (strategies other than optim_grads_params) the whole model is one."""
    m, ep = cfg.model, cfg.parallel.expert_model_parallel_size
    tp = cfg.parallel.tensor_model_parallel_size  # each rank holds 1/tp of every weight
    dp = cluster.world // cfg.parallel.model_parallel_size
    wb, gb = weight_bytes(cfg), grad_bytes(cfg)

    def comm(dense: int, experts: int, per: int) -> float:
        routed = cluster.collective_s(experts / ep / tp * per, dp // ep) if experts else 0.0
        return cluster.collective_s(dense / tp * per, dp) + routed

    outside = [g for g in parameter_groups(cfg, dp) if g.unit is None and not g.experts]
    units = [Unit(g.name, g.params // tp, comm(g.params, 0, wb), comm(g.params, 0, gb), 0.0, 0.0,
                  True) for g in outside]
    logits = logits_s(cfg, cluster, math)
    units[-1] = replace(units[-1], forward_s=logits / 3, backward_s=logits * 2 / 3)
    for index, moe in enumerate(m.moe.pattern(m.num_layers)):
        params = layer_parameters(m, moe)
        units.append(Unit(f"layer {index}", (params.dense + params.experts // ep) // tp,
                          comm(params.dense, params.experts, wb),
                          comm(params.dense, params.experts, gb),
                          *layer_seconds(cfg, cluster, moe, math,
                                         offloaded=index < m.cpu_offloading_num_layers)))
    if cfg.fsdp.sharding_strategy != ShardingStrategy.optim_grads_params:
        units = [merged(units)]
    if cfg.fsdp.sharding_strategy == ShardingStrategy.no_shard:  # an all-reduce, nothing gathered
        units = [replace(u, allgather_s=0.0, reduce_s=2 * u.reduce_s) for u in units]
    return units


def matmul_rate(cluster: Cluster, math: str) -> float:
    """FLOP/s a CPU rank's matmuls run at in `math`: the peak x the matmul fraction."""
    hw = cluster.hardware
    check_dtype(hw, math)
    return hw.tflops[math] * 1e12 * hw.matmul_fraction / cluster.host_share


def check_dtype(hw: Hardware, math: str) -> None:
    if math not in hw.tflops:
        raise ConfigError(f"cluster.gpu={hw.name} has no {math} matmul rate; its file has "
                          f"{', '.join(hw.tflops)}")


def logits_s(cfg: Config, cluster: Cluster, math: str) -> float:
    """The output layer's GEMM, forward and backward, for one microbatch."""
    if not cluster.kernel_classes:
        return logits_flops(cfg) / matmul_rate(cluster, math)
    check_dtype(cluster.hardware, math)
    tokens = cfg.train.micro_batch_size * cfg.model.seq_length
    logits = Gemm(tokens, padded_vocab(cfg) // cfg.parallel.tensor_model_parallel_size,
                  cfg.model.hidden_size)
    return 3 * gemm_s(logits, cluster.hardware, math, cluster.end)


def layer_seconds(cfg: Config, cluster: Cluster, moe: int, math: str,
                  offloaded: bool = False) -> tuple:
    """(forward, backward) of one layer for one microbatch: its kernels (on a GPU, by class,
    launcher/estimate/kernels.py; on a CPU, its FLOPs, the core attention with fp8 at bf16's rate, as
    FP8 recipes keep it), a full recomputation's second forward, an MoE layer's all-to-alls,
    an offloaded layer's copies to and from the host, and the host's time."""
    m, hw, ep = cfg.model, cluster.hardware, cfg.parallel.expert_model_parallel_size
    tokens = cfg.train.micro_batch_size * m.seq_length
    if cluster.kernel_classes:
        check_dtype(hw, math)
        kernels = layer_s(cfg, hw, moe, math, cluster.end)
        forward, backward = kernels.forward_s, kernels.backward_s
        host_f, host_b = kernels.host_forward_s, kernels.host_backward_s
    else:
        rate, attention_rate = matmul_rate(cluster, math), matmul_rate(cluster, "bf16")
        attention = 3 * 2 * m.head_channels * m.num_attention_heads * m.seq_length * tokens
        seconds = (layer_flops(cfg, moe) - attention) / rate + attention / attention_rate
        forward, backward = seconds / 3, seconds * 2 / 3
        host = cluster.host_s("moe_layer_host_us" if moe else "layer_host_us")
        host_f, host_b = host / 3, host * 2 / 3
    tp = cfg.parallel.tensor_model_parallel_size
    if tp > 1:  # two all-reduces each way, each an all-gather and a reduce-scatter
        activations = 2 * cluster.collective_s(tokens * m.hidden_size * weight_bytes(cfg), tp)
        forward, backward = forward + 2 * activations, backward + 2 * activations
    if m.recompute.granularity == RecomputeGranularity.full:
        backward, host_b = backward + forward, host_b + host_f
    if moe and ep > 1:  # dispatch and combine, forward; their transposes, backward
        a2a = 2 * cluster.collective_s(
            tokens * m.moe.router_topk * m.hidden_size * weight_bytes(cfg), ep)
        forward, backward = forward + a2a, backward + a2a
    if offloaded:  # each copy runs beside the next layer's compute, and that one waits for it
        copy = layer_activation_bytes(cfg, memory_spec(cfg)) / offload_rate(cluster)
        forward, backward = max(forward, copy), max(backward, copy)
    if not hw.async_host:  # a CPU: the host computes
        return forward + host_f, backward + host_b
    if CudaGraphImpl(cfg.cuda_graph.impl) == CudaGraphImpl.full_iteration:
        return forward, backward  # replayed: no launches
    return max(forward, host_f), max(backward, host_b)  # the kernels run behind the host


def offload_rate(cluster: Cluster) -> float:
    """Bytes/s an offloaded layer's activations move at, each way: a GPU's host link; on a CPU,
    a copy inside its memory."""
    if cluster.kernel_classes:
        return host_link_rate(cluster.hardware, cluster.end)
    return cluster.hardware.hbm_gbps * 1e9 / cluster.host_share


def merged(units: List[Unit]) -> Unit:
    """The whole model as one group: one collective each way (the units' times summed, so each
    unit's latency counts: a small overstatement)."""
    return Unit("all", sum(u.params for u in units), sum(u.allgather_s for u in units),
                sum(u.reduce_s for u in units), sum(u.forward_s for u in units),
                sum(u.backward_s for u in units), resident=True)


def window(units: List[Unit], start: int, step: int, elements: float,
           double_buffer: bool = False) -> List[int]:
    """The units one hook gathers, as Megatron-FSDP's all_gather_params chooses them
    (param_and_grad_buffer.py in megatron-core 0.19.2): its own, then the next ones (step +1
    forward, -1 backward, never the buckets outside the layers, which stay gathered) while those
    added so far, its own not counted, hold fewer than `elements`. With fsdp.double_buffer, at
    most two layers (its own and one more), and nothing beyond a bucket outside the layers."""
    chosen, added, at = [start], 0, start + step
    if double_buffer and units[start].resident:
        return chosen
    while 0 <= at < len(units) and not (step < 0 and units[at].resident) and added < elements:
        if double_buffer and len([u for u in chosen if not units[u].resident]) >= 2:
            break
        chosen.append(at)
        added += units[at].params
        at += step
    return chosen


def prefetch_elements(cfg: Config, units: List[Unit], version: Optional[str] = None) -> int:
    """Elements one all-gather hook has on its way, its own bucket's included (Megatron-FSDP's
    suggested_AG_prefetch_size): half of fsdp.suggested_communication_unit_size, or where that
    is null, of the unit megatron-core `version` (None: the installed one) infers from the
    mean layer (launcher/estimate/communication_unit.py)."""
    size = cfg.fsdp.suggested_communication_unit_size
    if size is None:
        layers = [u.params for u in units if not u.resident] or [0]
        size = communication_unit(sum(layers) // len(layers), version)
    return size // 2


class Channel:
    """The collectives, one after another in the order they are issued."""

    def __init__(self, free_at: float = 0.0):
        self.free_at = free_at

    def run(self, at: float, seconds: float) -> float:
        """Issue at `at`; returns when it is done."""
        self.free_at = max(at, self.free_at) + seconds
        return self.free_at


def simulate(cfg: Config, units: List[Unit], cluster: Cluster, prefetch: bool) -> Timeline:
    """One steady-state step, prefetch = the switch (see the module's docstring)."""
    hw = cluster.hardware
    strategy = ShardingStrategy(cfg.fsdp.sharding_strategy)
    released = strategy == ShardingStrategy.optim_grads_params
    every_microbatch = strategy in (ShardingStrategy.optim_grads,
                                    ShardingStrategy.optim_grads_params)
    elements, double = prefetch_elements(cfg, units), cfg.fsdp.double_buffer
    gap = cluster.host_s("step_host_us")
    dp = cluster.world // cfg.parallel.model_parallel_size
    microbatches = cfg.train.global_batch_size // (cfg.train.micro_batch_size * dp)
    channel, ready, t, tail = Channel(), {}, 0.0, 0.0
    gathers = strategy != ShardingStrategy.no_shard
    if gathers and prefetch:  # issued by the last step's start_param_sync
        issued = window(units, 0, 1, elements, double)
        if hw.async_host:  # torch.cuda.synchronize at the step's end waited for it
            tail = sum(units[u].allgather_s for u in issued)
            ready = {u: 0.0 for u in issued}
        else:  # gloo works beside the host, over its work between steps
            channel.free_at = -gap
            ready = {u: channel.run(-gap, units[u].allgather_s) for u in issued}
    first_wait, compute = None, 0.0

    def gather(u: int, step: int, alone: bool = False) -> float:
        for v in ([u] if alone else window(units, u, step, elements, double)):
            if v not in ready:
                ready[v] = channel.run(t, units[v].allgather_s)
        return max(0.0, ready[u] - t)

    for microbatch in range(microbatches):
        for u, unit in enumerate(units):  # forward; the output layer's logits come last
            wait = gather(u, 1, alone=u == 0) if gathers else 0.0
            first_wait = wait if first_wait is None else first_wait
            t += wait + (0.0 if unit.resident else unit.forward_s)
            if released and not unit.resident:
                del ready[u]
        t += sum(u.forward_s + u.backward_s for u in units if u.resident)  # the logits
        last = microbatch == microbatches - 1
        for u in range(len(units) - 1, -1, -1):  # backward
            inside = not units[u].resident
            t += (gather(u, -1) if gathers and inside else 0.0) + (
                units[u].backward_s if inside else 0.0)
            if released and inside:
                del ready[u]
            if every_microbatch or last:
                channel.run(t, units[u].reduce_s)
        compute += sum(u.forward_s + u.backward_s for u in units)
    t = max(t, channel.free_at)  # finish_grad_sync waits for every reduce-scatter
    optimizer = optimizer_s(cfg, units, cluster)
    return Timeline(t + optimizer + tail + gap, compute, optimizer, first_wait or 0.0, tail)


def optimizer_s(cfg: Config, units: List[Unit], cluster: Cluster) -> float:
    """Adam over the local shard: fp32 weights and both moments read and written, the gradient
    read, the model's weights written."""
    dp = cluster.world // cfg.parallel.model_parallel_size
    strategy = ShardingStrategy(cfg.fsdp.sharding_strategy)
    shard = sum(u.params for u in units) / (1 if strategy == ShardingStrategy.no_shard else dp)
    nbytes = shard * (2 * 4 + 2 * 8 + grad_bytes(cfg) + weight_bytes(cfg))
    if cluster.kernel_classes:
        return nbytes / hbm_rate(cluster.hardware, cluster.end)
    return nbytes / (cluster.hardware.hbm_gbps * 1e9) * cluster.host_share


def predict(cfg: Config, cluster: Cluster) -> Prediction:
    """The step of `cfg` on `cluster`, its GEMMs in the run's matmul dtype (fp8 with
    train.fp8.format set, else train.precision), its MFU against that dtype's peak."""
    math = cfg.train.matmul_dtype
    units = units_of(cfg, cluster, math)
    prefetch = cfg.fsdp.prefetch_first_param_group
    timeline = simulate(cfg, units, cluster, prefetch)
    world, m = cluster.world, cfg.model
    flops = flops_per_step(m, cfg.train.global_batch_size, padded_vocab(cfg))
    tflops = flops / timeline.step_s / world / 1e12
    dp = world // cfg.parallel.model_parallel_size
    memory = sum(memory_per_gpu(cfg, dp)[cfg.fsdp.sharding_strategy.value].values()) / GIB
    saving, why = switch(cfg, units, cluster, timeline)
    return Prediction(units, timeline,
                      cfg.train.global_batch_size * m.seq_length / timeline.step_s / world,
                      tflops, tflops / cluster.hardware.tflops[math], memory, saving, why)


def predict_band(cfg: Config, cluster: Cluster) -> Tuple[Prediction, Prediction]:
    """(slow, fast): the step with every rate at its band's low end, then at its high end
    (launcher/estimate/kernels.py). A CPU's figures are measured, not banded: the prediction twice."""
    if not cluster.kernel_classes:
        return predict(cfg, cluster), predict(cfg, cluster)
    return predict(cfg, replace(cluster, end=0.0)), predict(cfg, replace(cluster, end=1.0))


def switch(cfg: Config, units: List[Unit], cluster: Cluster, this: Timeline) -> tuple:
    """(saving in s, the reason it is large or small) of fsdp.prefetch_first_param_group."""
    strategy = ShardingStrategy(cfg.fsdp.sharding_strategy)
    if strategy == ShardingStrategy.no_shard:
        return None, "no_shard gathers nothing: the switch has nothing to move"
    if CudaGraphImpl(cfg.cuda_graph.impl) == CudaGraphImpl.full_iteration:
        return None, "a full-iteration CUDA graph needs the switch off"
    on = this if cfg.fsdp.prefetch_first_param_group else simulate(cfg, units, cluster, True)
    off = simulate(cfg, units, cluster, False) if cfg.fsdp.prefetch_first_param_group else this
    issued = window(units, 0, 1, prefetch_elements(cfg, units), cfg.fsdp.double_buffer)
    ms = 1e3
    if cluster.hardware.async_host:
        why = (f"off, the first forward waits {off.first_wait_s * ms:.3g} ms for the first "
               f"group; on, the step's sync point waits {on.tail_s * ms:.3g} ms for the "
               f"{len(issued)} unit(s) start_param_sync gathers, with no compute to hide behind")
    else:
        why = (f"off, the first forward waits {off.first_wait_s * ms:.3g} ms for the first "
               f"group; on, {on.first_wait_s * ms:.3g} ms: its all-gather runs during the "
               f"host's {cluster.host_s('step_host_us') * ms:.3g} ms between steps")
    saving = off.step_s - on.step_s
    return (0.0 if abs(saving) < 1e-12 else saving), why  # 0, not a rounding's -1.8e-15


def cluster_of(cfg: Config, world: Optional[World] = None) -> Cluster:
    """cluster.gpu's hardware in the run's world (the pre-flight's; None: the one the config
    alone states, launcher.config.world); raises ConfigError where the run does not fit it."""
    world = world or resolve_world(cfg.runtime, cfg.cluster)
    check_world_size(cfg, world.size, world.source)
    return Cluster(cfg.cluster.hardware(), world.per_node, world.nodes)
