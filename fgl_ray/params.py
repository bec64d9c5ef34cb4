"""Flat views of a model's shared trainable parameters and floating-point buffers.

Updates travel as one flat tensor per client; the layout maps slices back to named tensors
so that aggregators can work per layer. Only the parameters a model shares travel
(``model.shares(name)``, every parameter unless the model says otherwise, e.g. GIN's
convolutions only): the others stay in the client's own model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class ParamLayout:
    """Names, shapes and offsets of a model's trainable parameters in the flat vector."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, model: nn.Module) -> "ParamLayout":
        named = shared_named_parameters(model)
        return cls(tuple(n for n, _ in named), tuple(tuple(p.shape) for _, p in named))

    @property
    def sizes(self) -> list[int]:
        return [int(torch.Size(s).numel()) for s in self.shapes]

    @property
    def size(self) -> int:
        return sum(self.sizes)

    def slices(self) -> dict[str, slice]:
        """Name -> slice of the flat vector."""
        out, start = {}, 0
        for name, size in zip(self.names, self.sizes):
            out[name] = slice(start, start + size)
            start += size
        return out

    def groups(self, by: str = "tensor") -> list[slice]:
        """Contiguous parameter groups: each tensor, or each module (``by="module"``)."""
        if by == "tensor":
            return list(self.slices().values())
        if by != "module":
            raise ValueError(f"unknown grouping {by!r}; valid: tensor, module")
        groups: dict[str, slice] = {}
        for name, part in self.slices().items():
            module = name.rsplit(".", 1)[0]
            first = groups.get(module)
            groups[module] = slice(first.start if first else part.start, part.stop)
        return list(groups.values())


def shared_named_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """``(name, parameter)`` of the trainable parameters the model shares, in module order."""
    shares = getattr(model, "shares", None)
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad and (shares is None or shares(n))]


def shared_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The trainable parameters that travel, in the order of the flat weight vector."""
    return [p for _, p in shared_named_parameters(model)]


def trainable_vector(model: nn.Module) -> Tensor:
    """A detached copy of the shared trainable parameters as one flat tensor."""
    return torch.cat([p.detach().reshape(-1) for p in shared_parameters(model)]).clone()


def load_trainable_vector(model: nn.Module, vector: Tensor) -> None:
    """Copies ``vector`` into the model's shared trainable parameters in place."""
    params = shared_parameters(model)
    expected = sum(p.numel() for p in params)
    if vector.numel() != expected:
        raise ValueError(f"weight vector has {vector.numel()} entries, the model needs {expected}")
    start = 0
    with torch.no_grad():  # copy_, never alias: the vector may be a shared broadcast tensor
        for param in params:
            param.copy_(vector[start:start + param.numel()].view_as(param))
            start += param.numel()


def _float_buffers(model: nn.Module) -> list[Tensor]:
    return [b for b in model.buffers() if b.is_floating_point()]


def buffer_vector(model: nn.Module) -> Tensor:
    """Floating-point buffers (e.g. normalisation statistics) as one flat tensor; may be empty."""
    buffers = _float_buffers(model)
    if not buffers:
        return torch.zeros(0)
    return torch.cat([b.detach().reshape(-1).cpu() for b in buffers]).clone()


def load_buffer_vector(model: nn.Module, vector: Tensor) -> None:
    """Copies ``vector`` into the model's floating-point buffers in place."""
    start = 0
    with torch.no_grad():
        for buffer in _float_buffers(model):
            buffer.copy_(vector[start:start + buffer.numel()].view_as(buffer))
            start += buffer.numel()
