"""The errors a mistake in the input raises, and the default data folder: importable without
torch, PyG or Ray, so the command line validates and answers before loading them."""

from __future__ import annotations

from pathlib import Path


class DatasetUnavailable(ValueError):
    """A dataset that can be neither read nor fetched, or whose files are invalid; the message names
    the files and the fix."""


class PartitionError(ValueError):
    """The partition settings do not fit the loaded dataset (e.g. more clients than communities)."""


def default_data_dir() -> Path:
    """The per-user cache used when neither ``--data-dir`` nor ``FGL_DATA_DIR`` is set."""
    return Path.home() / ".cache" / "fgl-ray" / "datasets"
