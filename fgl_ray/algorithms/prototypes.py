"""Class prototypes: per-class sums on a client and their merge on the server.

Shared by the prototype methods (FedProto, FedProc, FedEPD, ...); pure tensor functions
except :func:`training_phase`. A client uploads, per class ``c``, either the sum ``s_c`` or the mean
``m_c = s_c / n_c`` of its representations together with the count ``n_c``; the server's
prototype of class ``c`` is the count-weighted mean over the clients that HAVE class ``c``
(``n_c > 0``). Clients without the class contribute nothing, so a class is never pulled
towards the zero vector that an absent class leaves in a client's upload (the OpenFGL
FedProto deviation noted in REFERENCE-NOTES.md).

:func:`training_phase` also serves MOON: representations compared with those of the model
being trained are taken in the same (training) phase, without dropout.
"""

from __future__ import annotations

from contextlib import contextmanager
from numbers import Real
from typing import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def class_sums(h: Tensor, y: Tensor, mask: Tensor | None, num_classes: int) -> tuple[Tensor, Tensor]:
    """Per-class sums and counts of the rows of ``h`` selected by ``mask``.

    Args:
        h: representations ``[n, d]``.
        y: integer labels ``[n]`` in ``0..num_classes-1``.
        mask: boolean ``[n]`` selecting the nodes to count (``None``: all nodes).
        num_classes: ``C``.

    Returns:
        ``(sums [C, d], counts [C])``; counts have ``h``'s dtype, absent classes have zero rows.
    """
    if mask is not None:
        h, y = h[mask], y[mask]
    sums = h.new_zeros(num_classes, h.shape[-1]).index_add_(0, y, h)
    counts = h.new_zeros(num_classes).index_add_(0, y, h.new_ones(y.shape[0]))
    return sums, counts


def class_means(h: Tensor, y: Tensor, mask: Tensor | None, num_classes: int) -> tuple[Tensor, Tensor]:
    """Per-class means (the local prototypes) and counts; classes without nodes get zero rows.

    Args and returns as :func:`class_sums`, with means in place of sums.
    """
    sums, counts = class_sums(h, y, mask, num_classes)
    return sums / counts.clamp(min=1).unsqueeze(-1), counts


def merge_prototypes(entries: Sequence[tuple[Tensor, Tensor]], are_sums: bool = False,
                     weighted: bool = True) -> tuple[Tensor, Tensor]:
    """Global prototypes from the clients' per-class statistics.

    For each class ``c``, with ``K_c`` the clients whose count ``n_{k,c}`` is positive:
    ``p_c = sum_{k in K_c} n_{k,c} m_{k,c} / sum_{k in K_c} n_{k,c}`` (``weighted``), or the
    plain mean of ``m_{k,c}`` over ``K_c`` (``weighted=False``, FedProto's Eq. 6 read as an
    unweighted average). A class no client holds gets a zero row and ``present[c] = False``.

    Args:
        entries: one ``(sums or means [C, d], counts [C])`` pair per client.
        are_sums: the first tensors are per-class sums (otherwise per-class means).
        weighted: weight clients by their class counts.

    Returns:
        ``(prototypes [C, d], present [C] bool)``, prototypes in float32.

    Raises:
        ValueError: if ``entries`` is empty or shapes disagree.
    """
    if not entries:
        raise ValueError("merge_prototypes needs at least one (prototypes, counts) entry")
    stats = torch.stack([e[0].double() for e in entries])          # [K, C, d]
    counts = torch.stack([e[1].double() for e in entries])         # [K, C]
    if stats.shape[:2] != counts.shape:
        raise ValueError(f"prototype statistics {tuple(stats.shape)} do not match counts {tuple(counts.shape)}")
    has = counts > 0
    if are_sums:
        means = stats / counts.clamp(min=1).unsqueeze(-1)
    else:
        means = stats
    coef = counts if weighted else has.double()
    coef = coef * has                                               # a client without class c adds nothing
    total = coef.sum(0)                                             # [C]
    present = total > 0
    protos = (coef.unsqueeze(-1) * means).sum(0) / total.clamp(min=1e-300).unsqueeze(-1)
    protos = torch.where(present.unsqueeze(-1), protos, torch.zeros_like(protos))
    return protos.float(), present


def prototype_contrastive_loss(z: Tensor, y: Tensor, prototypes: Tensor, present: Tensor,
                               temperature: float) -> Tensor:
    """Prototypical contrastive loss (FedProc): own-class prototype positive, others negative.

    ``-log( exp(cos(z_i, p_{y_i})/tau) / sum_{c present} exp(cos(z_i, p_c)/tau) )`` averaged over
    rows; classes without a prototype take no part. Every ``y_i`` must have a prototype.

    Args:
        z: representations ``[n, d]``.
        y: labels ``[n]``.
        prototypes: ``[C, d]``.
        present: boolean ``[C]``, which classes have a prototype.
        temperature: ``tau``.
    """
    if z.shape[0] == 0:
        return z.new_zeros(())
    logits = F.normalize(z, dim=-1) @ F.normalize(prototypes.to(z.dtype), dim=-1).T / temperature
    logits = logits.masked_fill(~present.bool(), float("-inf"))
    return F.cross_entropy(logits, y)


@contextmanager
def training_phase(model: nn.Module) -> Iterator[nn.Module]:
    """Puts ``model`` in its training phase with dropout disabled, restoring both afterwards.

    Representations compared with those of the model under training (prototypes, MOON's
    global and previous models) must come from the same function: for PMLP-GCN the training
    phase has no message passing while evaluation propagates, so eval mode would compare two
    different spaces. Dropout is switched off (``model.dropout`` when it is a number, as for
    every backbone here, and any ``nn.Dropout`` module) so these targets are deterministic
    and draw no random numbers. Use under ``torch.no_grad()``.
    """
    was_training = model.training
    rate = getattr(model, "dropout", None)
    numeric = isinstance(rate, Real) and not isinstance(rate, bool)
    model.train()
    if numeric:
        model.dropout = 0.0
    for module in model.modules():
        if isinstance(module, nn.modules.dropout._DropoutNd):
            module.eval()
    try:
        yield model
    finally:
        if numeric:
            model.dropout = rate
        model.train(was_training)
