"""Mock training data: seeded synthetic sequences with something to learn.

Sample i of the whole run counts up from a random token by a random stride (mod the vocabulary),
both drawn from a generator seeded with (seed, i). Every rank derives its own samples from the
global sample index, so a 2-rank run sees exactly the global batches of a 1-rank run.
"""

import torch


def make_sample(index: int, seed: int, seq_length: int, vocab_size: int) -> torch.Tensor:
    """seq_length + 1 tokens of sample `index`."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + index)
    start = torch.randint(0, vocab_size, (1,), generator=gen)
    stride = torch.randint(1, 8, (1,), generator=gen)
    return (start + stride * torch.arange(seq_length + 1)) % vocab_size


def microbatches(seed: int, seq_length: int, vocab_size: int, micro_batch_size: int,
                 global_batch_size: int, dp_rank: int, dp_size: int, fixed_batch: bool,
                 device: torch.device, first_step: int = 1):
    """Yields (tokens, labels, loss_mask, position_ids) microbatches forever, this rank's share,
    from optimizer step `first_step` on (a resumed run continues where its checkpoint was)."""
    per_rank = global_batch_size // dp_size
    step = first_step - 1
    while True:
        base = 0 if fixed_batch else step * global_batch_size
        for first in range(0, per_rank, micro_batch_size):
            indices = [base + dp_rank * per_rank + first + j for j in range(micro_batch_size)]
            batch = torch.stack([make_sample(i, seed, seq_length, vocab_size) for i in indices])
            batch = batch.to(device)
            tokens, labels = batch[:, :-1].contiguous(), batch[:, 1:].contiguous()
            positions = torch.arange(seq_length, device=device).expand(micro_batch_size, -1)
            yield tokens, labels, torch.ones_like(labels, dtype=torch.float), positions
        step += 1
