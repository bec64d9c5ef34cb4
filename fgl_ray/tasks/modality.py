"""Cross-modal readouts on multimodal graphs: modality matching and modality retrieval.

Both train the same objective: the symmetric InfoNCE between the visual and the text embeddings
(``e_v``, ``e_t``, from the model's ``modality_views``) of the client's training nodes, a node's
own pair being the positive and the other training nodes' the negatives (temperature 0.07, as
the peer benchmark OpenMAG uses; the FedMGS paper names only a contrastive loss). A node whose
modality is missing contributes the embedding its model produces for it (placeholder or
synthesised), as at evaluation.

* ``modality-matching``: AUC of ``cos(e_v_i, e_t_i)`` (own pair) against ``cos(e_v_i, e_t_j)``
  with ``j`` a fixed random derangement of the split's nodes (one mismatched pair per node),
  from additive histograms of the cosines; also over complete nodes only (``auc_complete``, own
  pairs against a derangement of the complete nodes, so no synthesised modality enters), since a
  synthesised modality is built from the node's other one and flatters the score.
* ``modality-retrieval``: each split node's text queries the split's visual embeddings of the
  same client (and the reverse), ranked by cosine. Candidates within ``TIE_TOLERANCE`` of the true
  partner's cosine tie with it and are ordered at random, in expectation: a hit within K counts
  ``clip((K - higher) / (ties + 1), 0, 1)`` and the reciprocal rank is its mean over the tied
  places, so identical embeddings (e.g. a whole client's placeholder modality) score at chance.
  Statistics: expected hits within the top 1/5/10 and reciprocal ranks per direction, also over
  complete nodes only (queries and candidates), which add over clients; Recall@K is the mean of
  both directions.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data

from fgl_ray.data.splits import client_generator
from fgl_ray.data.types import ClientGraph
from fgl_ray.metrics import auc_from_histograms, score_histogram
from fgl_ray.tasks.base import EVAL_SPLITS, TASKS, FullGraphTask, Stats

TEMPERATURE = 0.07
RECALL_AT = (1, 5, 10)
TIE_TOLERANCE = 1e-6     # cosines closer than this tie: float32 matmuls of identical rows differ by ~2e-8


def complete_nodes(data: Data) -> Tensor:
    """Nodes that observe both modalities, from the packed availability bits (multimodal layout)."""
    return (data.x[:, -2:] > 0.5).all(dim=1)


def derangement(count: int, generator: torch.Generator) -> Tensor:
    """A random permutation of ``range(count)`` without fixed points (identity for ``count < 2``)."""
    if count < 2:
        return torch.arange(count)
    shift = torch.randint(1, count, (1,), generator=generator)
    order = torch.randperm(count, generator=generator)
    mapping = torch.empty(count, dtype=torch.long)
    mapping[order] = order[(torch.arange(count) + shift) % count]   # a cycle through a random order
    return mapping


def info_nce(visual: Tensor, text: Tensor, temperature: float = TEMPERATURE) -> Tensor:
    """Symmetric InfoNCE of matched rows (row ``i`` of both is a pair)."""
    if visual.shape[0] == 0:
        return visual.sum() * 0.0
    logits = F.normalize(visual, dim=-1) @ F.normalize(text, dim=-1).T / temperature
    target = torch.arange(visual.shape[0], device=visual.device)
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2


class CrossModalTask(FullGraphTask):
    """Full-batch training on the client's graph with the InfoNCE of its training nodes."""

    def prepare(self, graph: ClientGraph, model: nn.Module, device) -> Data:
        data = graph.data.clone()
        generator = client_generator(self.config.data_seed, graph.client_id)
        for split in EVAL_SPLITS:
            data[f"{split}_partner"] = derangement(int(data[f"{split}_mask"].sum()), generator)
        complete = complete_nodes(data)
        for split in EVAL_SPLITS:                       # drawn after the first: those stay as they were
            count = int((data[f"{split}_mask"] & complete).sum())
            data[f"{split}_partner_complete"] = derangement(count, generator)
        return data.to(device)

    def classify(self, model: nn.Module, z: Tensor, batch: Data) -> Tensor:
        """``[e_v | e_t]``: the two modality embeddings side by side (the task's "outputs")."""
        return torch.cat(model.modality_views(z), dim=-1)

    def loss(self, logits: Tensor, batch: Data) -> Tensor:
        visual, text = logits[batch.train_mask].chunk(2, dim=-1)
        return info_nce(visual, text)

    @torch.no_grad()
    def evaluate(self, predict: Callable[[Data], Tensor], data: Data, num_classes: int) -> dict[str, Stats]:
        outputs = predict(data)
        complete = complete_nodes(data)
        stats = {}
        for split in EVAL_SPLITS:
            mask = data[f"{split}_mask"]
            visual, text = (F.normalize(e, dim=-1) for e in outputs[mask].chunk(2, dim=-1))
            stats[split] = self.split_stats(visual, text, data[f"{split}_partner"], complete[mask],
                                            data[f"{split}_partner_complete"])
        return stats

    def split_stats(self, visual: Tensor, text: Tensor, partner: Tensor, complete: Tensor,
                    partner_complete: Tensor) -> Stats:
        """The split's statistics: ``partner`` deranges its nodes, ``partner_complete`` its complete ones."""
        raise NotImplementedError


@TASKS.register("modality-matching")
class ModalityMatching(CrossModalTask):
    """AUC of own visual-text pairs against mismatched ones."""

    name = "modality-matching"
    headline = "auc"

    def split_stats(self, visual: Tensor, text: Tensor, partner: Tensor, complete: Tensor,
                    partner_complete: Tensor) -> Stats:
        own = ((visual * text).sum(-1) + 1) / 2                        # cosines mapped to [0, 1]
        other = ((visual * text[partner]).sum(-1) + 1) / 2
        other_complete = ((visual[complete] * text[complete][partner_complete]).sum(-1) + 1) / 2
        return {"positive": score_histogram(own.cpu()), "negative": score_histogram(other.cpu()),
                "positive_complete": score_histogram(own[complete].cpu()),
                "negative_complete": score_histogram(other_complete.cpu())}

    def scores(self, stats) -> dict[str, float]:
        return {"auc": auc_from_histograms(stats["positive"], stats["negative"]),
                "auc_complete": auc_from_histograms(stats["positive_complete"], stats["negative_complete"])}


@TASKS.register("modality-retrieval")
class ModalityRetrieval(CrossModalTask):
    """Recall@K of the true partner among the split's other-modality embeddings."""

    name = "modality-retrieval"
    headline = "recall_at_5"

    def split_stats(self, visual: Tensor, text: Tensor, partner: Tensor, complete: Tensor,
                    partner_complete: Tensor) -> Stats:
        return ranking_stats(visual, text, "") | ranking_stats(visual[complete], text[complete], "_complete")

    def scores(self, stats) -> dict[str, float]:
        return ranking_scores(stats, "") | ranking_scores(stats, "_complete")


DIRECTIONS = ("text_to_visual", "visual_to_text")


def tied_ranks(similarity: Tensor) -> tuple[Tensor, Tensor]:
    """Per row, the candidates scoring above its diagonal entry and those tying with it (itself excluded)."""
    gap = similarity - similarity.diagonal().unsqueeze(1)
    return (gap > TIE_TOLERANCE).sum(dim=1), (gap.abs() <= TIE_TOLERANCE).sum(dim=1) - 1


def expected_hits(higher: Tensor, ties: Tensor, k: int) -> Tensor:
    """Chance that the true partner lands within the top ``k`` when its ties are ordered at random."""
    return ((k - higher) / (ties + 1)).clamp(0, 1)


def expected_reciprocal_rank(higher: Tensor, ties: Tensor) -> Tensor:
    """Mean of ``1 / rank`` over the tied places ``higher + 1 .. higher + ties + 1`` (harmonic numbers)."""
    higher, ties = higher.double(), ties.double()
    return (torch.digamma(higher + ties + 2) - torch.digamma(higher + 1)) / (ties + 1)


def ranking_stats(visual: Tensor, text: Tensor, suffix: str) -> Stats:
    """Expected hits within the top 1/5/10 and reciprocal-rank sums of both directions, and the query count."""
    similarity = text @ visual.T                                       # text queries x visual candidates
    stats: Stats = {f"queries{suffix}": np.array([visual.shape[0]], dtype=np.int64)}
    for direction, matrix in zip(DIRECTIONS, (similarity, similarity.T)):
        higher, ties = tied_ranks(matrix)
        stats[f"{direction}_hits{suffix}"] = np.array([float(expected_hits(higher, ties, k).sum()) for k in RECALL_AT])
        stats[f"{direction}_reciprocal{suffix}"] = np.array([float(expected_reciprocal_rank(higher, ties).sum())])
    return stats


def ranking_scores(stats, suffix: str) -> dict[str, float]:
    """``recall_at_K`` and ``mrr`` (with ``suffix``), each the mean of the two directions."""
    queries = float(stats[f"queries{suffix}"][0])
    if queries == 0:
        return {f"recall_at_{k}{suffix}": float("nan") for k in RECALL_AT} | {f"mrr{suffix}": float("nan")}
    recall = {f"recall_at_{k}{suffix}": float(np.mean([stats[f"{d}_hits{suffix}"][i] for d in DIRECTIONS]) / queries)
              for i, k in enumerate(RECALL_AT)}
    return recall | {f"mrr{suffix}": float(np.mean([stats[f"{d}_reciprocal{suffix}"][0] for d in DIRECTIONS])
                                          / queries)}
