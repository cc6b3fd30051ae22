"""The baseline of bench/overhead.py: the same megatron-core GPT, wrapped in the same
Megatron-FSDP, trained on the same mock data, with no launcher code but what a CPU run of
megatron-core needs: the CPU compatibility layer (megatron-core on a machine without CUDA) and one
worker thread per gloo group (torch's two race and crash a run about once in 9,000 steps:
docs/crashes.md; with two, the collectives of a group overlap, and the bare loop's waits were
shorter than the launcher's for that reason alone, 2026-12-06: docs/performance.md).

    torchrun --nproc-per-node=1 bench/bare_loop.py --steps 20 [--layers 24 --hidden 2048 ...]

Prints `first step done` when step 1 ends, and at the end one JSON line {"step_times_s": [...],
"rss_growth_bytes_per_step": ...} (RSS after the last step minus after the first, per step).
"""

import argparse
import json
import os
import time

import torch
import torch.nn.functional as F


def build(args, on_cpu: bool):
    from megatron.core import parallel_state, tensor_parallel
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.distributed.finalize_model_grads import finalize_model_grads
    from megatron.core.distributed.fsdp.mcore_fsdp_adapter import FullyShardedDataParallel
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer import TransformerConfig

    from megatron.core.transformer.module import Float16Module

    parallel_state.initialize_model_parallel()
    tensor_parallel.model_parallel_cuda_manual_seed(1234)
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    config = TransformerConfig(num_layers=args.layers, hidden_size=args.hidden,
                               num_attention_heads=args.heads, num_query_groups=args.heads,
                               ffn_hidden_size=args.ffn or 4 * args.hidden,
                               activation_func=F.gelu, hidden_dropout=0.0, attention_dropout=0.0,
                               attention_softmax_in_fp32=False,
                               bf16=args.bf16, params_dtype=dtype, pipeline_dtype=dtype,
                               use_cpu_initialization=on_cpu,
                               # as Megatron-LM (core_transformer_config_from_args) and the
                               # launcher build it: megatron's schedule then starts the backward
                               # itself (custom_backward), which on a CPU runs under the CPU
                               # layer's mode; without it the bare loop's backward ran outside
                               # it, a third fewer calls of the layer (2026-12-06)
                               deallocate_pipeline_outputs=True)
    gpt = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(),
                   vocab_size=args.padded_vocab or args.vocab, max_sequence_length=args.seq)
    if args.bf16:
        gpt = Float16Module(config, gpt)  # as the launcher and Megatron-LM's get_model do
    ddp = DistributedDataParallelConfig(
        use_megatron_fsdp=True, use_distributed_optimizer=True,
        data_parallel_sharding_strategy="optim_grads_params",
        fsdp_all_gather_in_start_param_sync=args.prefetch == "true", overlap_grad_reduce=True,
        overlap_param_gather=True, gradient_reduce_div_fusion=not on_cpu,
        # Megatron-LM's defaults, which the launcher now builds too (docs/megatron_lm_parity.md)
        check_for_nan_in_grad=True, grad_reduce_in_fp32=args.bf16)
    device = torch.device("cpu") if on_cpu else torch.device("cuda", torch.cuda.current_device())
    model = FullyShardedDataParallel(config, ddp, gpt, device=device)
    config.finalize_model_grads_func = finalize_model_grads
    config.no_sync_func = model.no_sync
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-3, weight_decay=0.01, clip_grad=1.0,
                        bf16=args.bf16, params_dtype=dtype, use_distributed_optimizer=True),
        [model])
    config.grad_scale_func = optimizer.scale_loss
    return model, optimizer, device


def batches(args, dp_rank, dp_size, device):
    """The same mock samples as the launcher's: sample i counts up by a seeded stride."""
    per_rank, step = args.global_batch // dp_size, 0
    while True:
        for first in range(0, per_rank, args.micro_batch):
            rows = []
            for j in range(args.micro_batch):
                gen = torch.Generator().manual_seed(
                    1234 * 1_000_003 + step * args.global_batch + dp_rank * per_rank + first + j)
                start = torch.randint(0, args.vocab, (1,), generator=gen)
                stride = torch.randint(1, 8, (1,), generator=gen)
                rows.append((start + stride * torch.arange(args.seq + 1)) % args.vocab)
            batch = torch.stack(rows).to(device)
            yield batch[:, :-1], batch[:, 1:], torch.arange(args.seq, device=device).expand(
                args.micro_batch, -1)
        step += 1


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--micro-batch", type=int, default=2)
    parser.add_argument("--global-batch", type=int, default=8)
    # the model: by default the tiny GPT of model=tiny (bench/anchors.py passes a recipe's)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--ffn", type=int, default=None, help="default: 4 x hidden")
    parser.add_argument("--vocab", type=int, default=128, help="the mock data's vocabulary")
    parser.add_argument("--padded-vocab", type=int, default=None,
                        help="the model's vocabulary; default: --vocab")
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--prefetch", choices=["true", "false"], default="true",
                        help="fsdp_all_gather_in_start_param_sync")
    return parser.parse_args()


def main():
    args = parse_args()
    on_cpu = not torch.cuda.is_available()
    if on_cpu:
        from launcher.run import cpu_compat, gloo

        cpu_compat.activate()
        gloo.use_one_worker_per_group()
    else:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.distributed.init_process_group("gloo" if on_cpu else "nccl")
    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel import get_forward_backward_func

    model, optimizer, device = build(args, on_cpu)
    dp_size = parallel_state.get_data_parallel_world_size()
    data = batches(args, parallel_state.get_data_parallel_rank(), dp_size, device)
    forward_backward = get_forward_backward_func()

    def forward_step(iterator, model):
        tokens, labels, positions = next(iterator)
        output = model(tokens, positions, None, labels=labels)
        return output, lambda losses: (losses.float().mean(), {"lm loss": losses.float().mean()})

    from launcher.run.step_stats import current_rss_bytes, growth_per_step

    times, rss = [], [None, None]
    for step in range(1, args.steps + 1):
        start = time.perf_counter()
        model.zero_grad_buffer()
        optimizer.zero_grad()
        outputs = forward_backward(forward_step_func=forward_step, data_iterator=data,
                                   model=[model], num_microbatches=args.global_batch // (
                                       args.micro_batch * dp_size),
                                   seq_length=args.seq, micro_batch_size=args.micro_batch,
                                   forward_only=False)
        loss = torch.stack([o["lm loss"] for o in outputs]).mean()
        torch.distributed.all_reduce(loss)
        loss.item()
        optimizer.step()
        if not on_cpu:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        rss[step > 1] = current_rss_bytes()  # [after the first step, after the latest]
        if step == 1 and torch.distributed.get_rank() == 0:
            print("first step done", flush=True)
    if torch.distributed.get_rank() == 0:
        print(json.dumps({"step_times_s": times,
                          "rss_growth_bytes_per_step": growth_per_step(*rss, args.steps)}),
              flush=True)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
