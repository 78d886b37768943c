"""The `distributed` group: how many processes train together and how they talk (bench.launch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from bench.config.fields import Checks, Choice, positive


class DistributedName(Choice):
    single = "single"  # one process on one device
    ddp = "ddp"  # DistributedDataParallel, one process per GPU (gloo on CPU)


class Backend(Choice):
    auto = "auto"  # nccl with CUDA, gloo otherwise
    nccl = "nccl"
    gloo = "gloo"


class Scaling(Choice):
    weak = "weak"  # data.batch_size per process: the global batch grows with the process count
    strong = "strong"  # data.batch_size is the global batch, split over the processes


@dataclass
class DistributedConfig(Checks):
    KEY = "distributed"
    name: DistributedName = DistributedName.single
    nproc_per_node: int = positive(1)  # processes (one GPU each) on this node
    nnodes: int = positive(1)
    node_rank: int = 0
    # host:port of the rendezvous; null: a free port on 127.0.0.1 (single node)
    rdzv_endpoint: Optional[str] = None
    backend: Backend = Backend.auto
    timeout_s: float = positive(300.0)  # a dead or hung rank ends the job within this
    scaling: Scaling = Scaling.weak
    gradient_as_bucket_view: bool = True
    static_graph: bool = True
    bucket_cap_mb: int = positive(25)

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    def per_process(self, batch: int, world: int = 0) -> int:
        """`batch` (data.batch_size, a progressive phase's) as each of the `world` processes' (default: this
        config's): weak scaling keeps it, strong splits it (the schema refuses a batch that does not split)."""
        return batch // (world or self.world_size) if self.scaling == Scaling.strong else batch

    def rules(self) -> None:
        if self.name == DistributedName.single and self.nnodes != 1:
            self._fail("nnodes", "1 with distributed=single (more than one node needs distributed=ddp)")
        if self.name == DistributedName.single and self.world_size != 1:
            self._fail("nproc_per_node", "1 with distributed=single (multi-process runs need distributed=ddp)")
        if not 0 <= self.node_rank < self.nnodes:
            self._fail("node_rank", f"0 to {self.nnodes - 1} (distributed.nnodes - 1)")
        endpoint = self.rdzv_endpoint
        if self.nnodes > 1 and not endpoint:
            self._fail("rdzv_endpoint", "host:port of the rendezvous (node 0's address) when distributed.nnodes > 1")
        if endpoint and (":" not in endpoint or not endpoint.rsplit(":", 1)[1].isdigit()):
            self._fail("rdzv_endpoint", "host:port, e.g. node0:29500")
