"""The errors a mistake in the input raises, the default data folder and output locations:
importable without torch, PyG or Ray, so the command line validates and answers before loading them."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

FOLDER_NAME_RULE = "one folder name: letters, digits, '-', '_' and '.' (not '.' or '..', at most 255 bytes)"
"""What every name that becomes a path must be: run, compare and grid names, grid point ids."""


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


def folder_name(name: object, what: str) -> str:
    """``name`` when it is one folder name (:data:`FOLDER_NAME_RULE`), so that a folder made from it
    stays inside the folder it is made in.

    Raises:
        ValueError: naming ``what`` (e.g. ``run_name``), the name and the rule.
    """
    if (not isinstance(name, str) or name in ("", ".", "..") or len(name.encode()) > 255
            or not all(char.isalnum() or char in "-_." for char in name)):
        raise ValueError(f"{what} {name!r} is not {FOLDER_NAME_RULE}; e.g. my-run")
    return name


def as_folder_name(text: str) -> str:
    """``text`` made into one folder name: every character but ASCII letters, digits, ``-``, ``_``
    and ``.`` becomes ``_``, cut to 255 characters."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", text)[:255]
    return "_" if name in ("", ".", "..") else name


def output_problem(folder: Path) -> str | None:
    """Why the folder ``folder`` cannot be used for new run folders, or None.

    A probe folder is created and removed in the deepest folder that exists (``folder`` itself
    or the ancestor the run would create it in), so permissions, read-only mounts and pseudo
    file systems such as ``/proc`` are answered as the run's own ``mkdir`` would answer them.
    """
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return "is a file" if existing == folder else f"lies under the file {str(existing)!r}"
    import tempfile

    try:
        os.rmdir(tempfile.mkdtemp(prefix=".fgl-ray-probe-", dir=existing))
    except OSError as error:
        where = "refuses new folders" if existing == folder else f"cannot be created in {str(existing)!r}"
        return f"{where} ({error.strerror or error})"
    return None


def file_problem(path: Path) -> str | None:
    """Why ``path`` is not a regular file to read (missing, a folder, a device or pipe), or None."""
    if path.is_file():
        return None
    if path.is_dir():
        return "is a folder; give the YAML file itself"
    if path.exists():
        return "is not a regular file (a device, pipe or socket); give the YAML file itself"
    return "does not exist"


def unreachable(address: str, timeout_s: float = 2.0) -> str | None:
    """Why nothing answers at a ``host:port`` Ray address (a TCP connect within ``timeout_s``), or
    None; other forms (``auto``, ``ray://``, ``local``) are left to Ray."""
    import socket

    host, sep, port = address.rpartition(":")
    if "://" in address or not sep or not port.isdigit() or not host:
        return None
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return None
    except OSError as error:
        return f"no Ray cluster answers there ({error.strerror or error})"
