"""FedAvg whose missing modality inputs take the federation's mean of the observed ones.

The "-MM" mean-filling baseline where a client may lack a modality entirely (client-level
missingness), so that no local mean exists. Every round each client uploads, per modality, the
sum and the count of its observed input rows (``feature_sums [d_visual + d_text]``,
``feature_counts [2]``: nothing per node); the server keeps each client's latest report and
broadcasts the pooled means ``fill``, which :class:`~fgl_ray.models.multimodal.MultimodalGNN`
puts in place of every missing block (zeros before the first broadcast). Training is FedAvg's.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from fgl_ray.algorithms.base import ALGORITHMS, Algorithm, ClientContext
from fgl_ray.messages import Broadcast, ClientUpdate
from fgl_ray.models.multimodal import MULTIMODAL_TASKS


@ALGORITHMS.register("fedavg_fill")
class FedAvgFill(Algorithm):
    """FedAvg on ``mm_gnn`` with missing inputs filled by the pooled mean of the observed rows."""

    tasks = MULTIMODAL_TASKS
    models = ("mm_gnn",)
    default_dataset = "synthetic-mm"

    def widths(self) -> tuple[int, int]:
        return tuple(int(d) for d in self.config.model_options["modality_dims"])

    def receive(self, ctx: ClientContext, broadcast: Broadcast) -> None:
        super().receive(ctx, broadcast)
        fill = ctx.server_stats.get("fill")
        ctx.model.fill_values = None if fill is None else fill.to(ctx.device)

    @torch.no_grad()
    def upload(self, ctx: ClientContext) -> dict[str, Tensor]:
        """Per modality, the sum and the count of the client's observed input rows."""
        batch = next(iter(ctx.task.representation_batches(ctx.data)))
        views, available = ctx.model.split(ctx.task.node_inputs(batch)[0])
        sums = torch.cat([(view * available[:, m:m + 1]).sum(0) for m, view in enumerate(views)])
        return {"feature_sums": sums, "feature_counts": available.sum(0).to(sums.dtype)}

    def declared_stats(self, num_classes: int, hidden: int, num_features: int) -> dict[str, tuple[int, ...]]:
        return {"feature_sums": (sum(self.widths()),), "feature_counts": (2,)}

    def setup_server(self, server) -> None:
        self.reports: dict[int, tuple[Tensor, Tensor]] = {}

    def aggregate(self, server, updates: Sequence[ClientUpdate]) -> None:
        server.aggregate_with_aggregator(updates)
        self.reports.update({u.client_id: (u.stats["feature_sums"], u.stats["feature_counts"]) for u in updates})

    def server_stats(self, server) -> dict[str, Tensor]:
        """``fill``: each modality's pooled mean over every client's latest report (zeros if none observed it)."""
        if not self.reports:
            return {}
        sums = torch.stack([s for s, _ in self.reports.values()]).sum(0)
        counts = torch.stack([c for _, c in self.reports.values()]).sum(0)
        blocks = sums.split(self.widths())
        return {"fill": torch.cat([block / counts[m].clamp(min=1.0) for m, block in enumerate(blocks)])}
