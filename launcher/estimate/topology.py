"""The cluster a dry run predicts for, as the time model (launcher/estimate/predict.py) sees it: its
hardware file, ranks per node and nodes, where in each rate's band it runs, and from those the
NVLink domains, one collective's time over NVLink or across the NICs, and a CPU's ranks sharing
its cores. Torch-free."""

from dataclasses import dataclass

from launcher.config.cluster import Hardware
from launcher.estimate.kernels import at


@dataclass(frozen=True)
class Cluster:
    hardware: Hardware
    gpus_per_node: int
    nodes: int
    end: float = 0.5
    """Where in each rate's band (launcher/estimate/kernels.py) the prediction runs: 0 every rate
    at its low end, 1 at its high end, 0.5 the middle."""

    @property
    def world(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def kernel_classes(self) -> bool:
        """A GPU file with its kernel classes; else (a CPU) every FLOP at one rate."""
        return self.hardware.gemm_fraction is not None

    @property
    def nvlink_ranks(self) -> int:
        """Ranks one NVLink domain joins: a rack-wide domain (an NVL72) spans its nodes;
        a node's own (a DGX's 8) holds only the ranks started on it."""
        hw = self.hardware
        if hw.nvlink_domain > hw.gpus_per_node:
            return hw.nvlink_domain
        return min(hw.nvlink_domain, self.gpus_per_node)

    def collective_s(self, nbytes: float, ranks: int) -> float:
        """One all-gather, reduce-scatter or all-to-all moving `nbytes` in all over `ranks`."""
        if ranks <= 1:
            return 0.0
        hw = self.hardware
        across = ranks > self.nvlink_ranks
        latency, bandwidth = hw.collective(ranks, across, self.gpus_per_node)
        if self.kernel_classes and across:  # NCCL's rings leave a domain by each of its
            # ranks' NICs (one per GPU), and never faster than they cross NVLink
            bandwidth = min(hw.intra_node_gbps * 1e9 * at(hw.bus_fraction, self.end),
                            bandwidth * min(self.nvlink_ranks, ranks) * at(hw.nic_fraction,
                                                                           self.end))
        elif self.kernel_classes:
            bandwidth *= at(hw.bus_fraction, self.end)
        return latency + (ranks - 1) / ranks * nbytes / bandwidth

    @property
    def host_share(self) -> float:
        """How much slower a CPU rank computes for sharing the cores with the node's other
        ranks."""
        cores = self.hardware.cores
        return max(1.0, self.gpus_per_node / cores) if cores else 1.0

    def host_s(self, name: str) -> float:
        """A host time (layer_host_us, step_host_us) in seconds, for this node's ranks: as
        measured with them, or the scalar slowed by their share of the cores."""
        hw = self.hardware
        share = 1.0 if hw.measured_host else self.host_share
        return hw.at(name, self.gpus_per_node) * 1e-6 * share
