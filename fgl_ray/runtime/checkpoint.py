"""Checkpoints of a whole federation, written by the driver into the run folder.

A checkpoint holds the server (every server model, the aggregator's and the algorithm's state,
its sampling RNG), every client (model, optimizer, algorithm state), the torch RNG state of each
process and the driver's bookkeeping (coverage, how far the metric parts and ``failures.jsonl``
had got). Server and clients serialise themselves to bytes where they live, so a checkpoint
crosses Ray's object store as plain bytes and the driver alone writes files. Resuming rebuilds
the federation from the config and the data, loads the checkpoint and runs the rounds after it;
every random draw is seeded from (seed, round, client), so the resumed metrics equal those of an
uninterrupted run.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fgl_ray.config import ConfigError

CHECKPOINT_FILE = "checkpoint.pt"


def to_bytes(value: Any) -> bytes:
    """``value`` pickled with ``torch.save`` (tensors, modules, optimizer states, numpy RNGs)."""
    sink = io.BytesIO()
    torch.save(value, sink)
    return sink.getvalue()


def from_bytes(blob: bytes, device: torch.device | str = "cpu") -> Any:
    """The inverse of :func:`to_bytes`, tensors mapped onto ``device``."""
    return torch.load(io.BytesIO(blob), map_location=device, weights_only=False)


def object_state(obj: object, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The attributes of ``obj`` that carry state (all but ``skip``)."""
    return {name: value for name, value in vars(obj).items() if name not in skip}


@dataclass
class Checkpoint:
    """The federation after round ``next_round - 1``.

    Attributes:
        next_round: the round a resumed run starts with.
        server: the server's bytes (:meth:`ServerRuntime.state_bytes`).
        clients: each client's bytes (:meth:`ClientRuntime.state_bytes`).
        driver: the driver loop's bookkeeping (coverage, metric parts written, failure log).
    """

    next_round: int
    server: bytes
    clients: dict[int, bytes]
    driver: dict[str, Any] = field(default_factory=dict)


def save_checkpoint(run_dir: Path, checkpoint: Checkpoint) -> Path:
    """Writes ``checkpoint.pt`` atomically (a half-written checkpoint is never visible)."""
    final = Path(run_dir) / CHECKPOINT_FILE
    tmp = final.with_name(f".{final.name}.tmp")
    with open(tmp, "wb") as sink:
        torch.save(checkpoint.__dict__, sink)
        sink.flush()
        os.fsync(sink.fileno())
    os.replace(tmp, final)
    return final


def load_checkpoint(run_dir: Path) -> Checkpoint:
    """The checkpoint of the run in ``run_dir``.

    Raises:
        ConfigError: the folder holds no checkpoint.
    """
    path = Path(run_dir) / CHECKPOINT_FILE
    if not path.is_file():
        raise ConfigError(f"{run_dir} holds no {CHECKPOINT_FILE}: the run saved no checkpoint (run it with "
                          "--checkpoint-every N, or stop it with Ctrl-C, to make one)")
    return Checkpoint(**torch.load(path, map_location="cpu", weights_only=False))

