"""What a mixture of experts did in a step: its load-balancing loss and the tokens each expert got.

The loss is megatron-core's own record: each router adds its layer's aux loss to the MoE metrics
tracker (transformer/moe/moe_logging.py), and `report` reduces it over the ranks and averages it
over MoE layers and microbatches, as Megatron-LM's training_log does every step
(track_moe_metrics). Tokens per expert are counted from each router's routing map (a forward hook,
summed over MoE layers and microbatches, then over the data-parallel ranks). Both are collectives:
every rank calls `record` after every step (launcher.run.hooks). A model without experts gets no
probe.
"""

from typing import List, Optional

import torch
from megatron.core import parallel_state
from megatron.core.transformer.moe.moe_logging import get_moe_metrics_tracker
from megatron.core.transformer.moe.router import Router

from launcher.run.hooks import StepHook
from launcher.run.outputs import Metric

_LOSS = "load_balancing_loss"


class ExpertProbe(StepHook):
    """Counts the routing of every MoE layer of `model`: a step hook (launcher.run.hooks), whose
    record (a collective) is the step's load-balancing loss and tokens per expert, and empties the
    counts."""

    declared = (
        Metric("moe_aux_loss", "train/moe_aux_loss", "", "megatron's load-balancing loss, "
               "averaged over MoE layers and microbatches (1 when balanced); null when off"),
        Metric("tokens_per_expert", None, "tokens", "tokens routed to each expert, over every MoE "
               "layer and data-parallel rank (a list: not charted)"),
    )

    def __init__(self, model, num_experts: int, num_layers: int, layer_pattern: List[int],
                 num_microbatches: int):
        self.num_layers, self.pattern = num_layers, layer_pattern
        self.loss_scale = 1.0 / num_microbatches
        self.num_experts = num_experts
        self.counts: Optional[torch.Tensor] = None  # on the routers' device, summed there
        routers = [m for m in model.modules() if isinstance(m, Router)]
        self.handles = [r.register_forward_hook(self._count) for r in routers]

    def _count(self, router, inputs, outputs) -> None:
        if router.training:  # validation steps route tokens too; they are not the step's
            counted = outputs[1].sum(dim=0, dtype=torch.long)  # routing map: tokens x experts
            self.counts = counted if self.counts is None else self.counts + counted

    def record(self, step: int) -> dict:
        """{"moe_aux_loss": the step's load-balancing loss (null when the loss is off),
        "tokens_per_expert": [tokens routed to each expert, over every MoE layer and rank]}."""
        totals = {}
        get_moe_metrics_tracker().report(
            loss_scale=self.loss_scale, iteration=0, track_names=[_LOSS],
            num_layers=self.num_layers, moe_layer_freq=self.pattern, total_loss_dict=totals)
        counts = self.counts
        if counts is None:  # no MoE layer routed a token on this rank (every rank must reduce)
            device = "cuda" if torch.cuda.is_available() else "cpu"
            counts = torch.zeros(self.num_experts, dtype=torch.long, device=device)
        torch.distributed.all_reduce(counts, group=parallel_state.get_data_parallel_group())
        self.counts = None
        loss: Optional[torch.Tensor] = totals.get(_LOSS)
        return {"moe_aux_loss": None if loss is None else float(loss),
                "tokens_per_expert": counts.tolist()}


def probe_for(model, cfg, num_microbatches: int) -> Optional[ExpertProbe]:
    moe = cfg.model.moe
    if not moe.enabled:
        return None
    return ExpertProbe(model, moe.num_experts, cfg.model.num_layers,
                       moe.pattern(cfg.model.num_layers), num_microbatches)
