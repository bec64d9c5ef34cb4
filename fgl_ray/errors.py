"""The errors a mistake in the input raises, the default data folder and output locations:
importable without torch, PyG or Ray, so the command line validates and answers before loading them."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse


class DatasetUnavailable(ValueError):
    """A dataset that can be neither read nor fetched, or whose files are invalid; the message names
    the files and the fix."""


class PartitionError(ValueError):
    """The partition settings do not fit the loaded dataset (e.g. more clients than communities)."""


def default_data_dir() -> Path:
    """The per-user cache used when neither ``--data-dir`` nor ``FGL_DATA_DIR`` is set."""
    return Path.home() / ".cache" / "fgl-ray" / "datasets"


def output_folder(value: str | Path, what: str = "output_dir") -> Path:
    """An output location as a folder: a path or a ``file://`` URI (a grid resolves its folder
    once, on the driver, so trials on every node write to the same place).

    Raises:
        ValueError: another URI scheme (object stores are not written directly).
    """
    text = str(value)
    if "://" in text:
        parsed = urlparse(text)
        if parsed.scheme != "file":
            raise ValueError(f"{what} {text!r}: only folders (a path or a file:// URI) are supported, not "
                             f"{parsed.scheme}:// storage; mount it (s3fs, gcsfuse) or use a folder every node shares")
        text = unquote(parsed.netloc + parsed.path)
    return Path(text).expanduser()
