"""The step's model side, as Megatron-LM's pretrain_gpt.py writes it beside its training loop: the
forward step megatron's schedule calls per microbatch with its loss function (the masked mean of
the token losses), and the step's loss reduced over the data-parallel ranks."""

import torch
from megatron.core import parallel_state


def forward_step(poison: bool):
    """The forward step megatron's schedule calls per microbatch; `poison` makes its loss NaN
    (train.inject_nan_at_step: a test hook for the NaN guard)."""

    def step(data_iterator, model):
        batch = next(data_iterator)  # a dict (launcher.data.datasets.microbatches)
        loss_mask = batch["loss_mask"]
        output = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])

        def loss_func(losses):
            loss = torch.sum(losses.float().view(-1) * loss_mask.view(-1)) / loss_mask.sum()
            if poison:
                loss = loss * float("nan")
            return loss, {"lm loss": loss.detach().clone()}  # the schedule scales loss in place

        return output, loss_func

    return step


def mean_loss(outputs) -> float:
    """The step's loss: the mean over microbatches, averaged over data-parallel ranks."""
    loss = torch.stack([o["lm loss"] for o in outputs]).mean() if outputs else torch.zeros(())
    torch.distributed.all_reduce(loss, group=parallel_state.get_data_parallel_group())
    return (loss / parallel_state.get_data_parallel_world_size()).item()
