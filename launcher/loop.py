"""The training loop: one step in `train_step`, the loop in `train`."""

import time

import torch
from megatron.core import parallel_state
from megatron.core.pipeline_parallel import get_forward_backward_func


def forward_step(data_iterator, model):
    """One microbatch through the model; megatron's schedule calls the returned loss function."""
    tokens, labels, loss_mask, positions = next(data_iterator)
    output = model(tokens, positions, None, labels=labels)

    def loss_func(losses):
        loss = torch.sum(losses.float().view(-1) * loss_mask.view(-1)) / loss_mask.sum()
        return loss, {"lm loss": loss.detach().clone()}  # the schedule scales loss in place

    return output, loss_func


def train_step(model, optimizer, scheduler, forward_backward, data_iterator, num_microbatches,
               seq_length, micro_batch_size):
    """Forward/backward over all microbatches, optimizer step; returns (loss, grad_norm)."""
    model.zero_grad_buffer()
    optimizer.zero_grad()
    outputs = forward_backward(
        forward_step_func=forward_step,
        data_iterator=data_iterator,
        model=[model],
        num_microbatches=num_microbatches,
        seq_length=seq_length,
        micro_batch_size=micro_batch_size,
        forward_only=False,
    )
    _, grad_norm, _ = optimizer.step()
    scheduler.step(increment=1)
    loss = torch.stack([o["lm loss"] for o in outputs]).mean() if outputs else torch.zeros(())
    torch.distributed.all_reduce(loss, group=parallel_state.get_data_parallel_group())
    loss = loss / parallel_state.get_data_parallel_world_size()
    return loss.item(), grad_norm  # .item() is a host-device sync point, once per step


def train(model, optimizer, scheduler, data_iterator, steps, num_microbatches, seq_length,
          micro_batch_size, on_step, forward_backward=None):
    """Runs `steps` optimizer steps; calls on_step(step, loss, grad_norm, seconds) after each."""
    forward_backward = forward_backward or get_forward_backward_func()
    for step in range(1, steps + 1):
        start = time.perf_counter()
        loss, grad_norm = train_step(model, optimizer, scheduler, forward_backward, data_iterator,
                                     num_microbatches, seq_length, micro_batch_size)
        if torch.cuda.is_available():
            torch.cuda.synchronize()  # so the step time covers the GPU work
        on_step(step, loss, grad_norm, time.perf_counter() - start)
