"""The run manifest: what ran, with which versions and seeds, where and when."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Any

import numpy as np

import fgl_ray

MANIFEST_NAME = "manifest.json"
# version key -> distribution name; read from package metadata so nothing (Ray) is imported.
VERSIONED_DISTRIBUTIONS = {
    "fgl_ray": "fgl-ray",
    "torch": "torch",
    "torch_geometric": "torch-geometric",
    "ray": "ray",
    "numpy": "numpy",
    "pyarrow": "pyarrow",
}


def package_versions() -> dict[str, str | None]:
    """Versions of Python and the key packages; None for a package that is not installed.

    Returns:
        ``{"python": ..., "fgl_ray": ..., "torch": ..., ...}``. fgl_ray falls back to its
        ``__version__`` when run from a checkout that is not installed.
    """
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for key, dist in VERSIONED_DISTRIBUTIONS.items():
        try:
            versions[key] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[key] = None
    versions["fgl_ray"] = versions["fgl_ray"] or fgl_ray.__version__
    return versions


def git_revision() -> str | None:
    """The commit checked out where the fgl_ray package lives.

    Returns:
        The ``git rev-parse HEAD`` hash, or None when git is missing, fails, or the package
        is not in a git checkout.
    """
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(fgl_ray.__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    revision = done.stdout.strip()
    return revision if done.returncode == 0 and revision else None


def _to_json(obj: Any) -> Any:
    """``json.dump`` fallback for paths, sets and numpy values."""
    if isinstance(obj, PurePath):
        return str(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=str)
    if isinstance(obj, (np.generic, np.ndarray)):
        return obj.tolist()
    if isinstance(obj, (dt.datetime, dt.date)):
        return obj.isoformat()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable: {obj!r}")


def write_json(path: Path, data: Mapping[str, Any]) -> Path:
    """Writes JSON atomically (temporary file, then rename).

    Paths become strings, tuples and sets lists, numpy values Python numbers.

    Args:
        path: the target file.
        data: the JSON object.

    Returns:
        ``path``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as sink:
        json.dump(data, sink, indent=2, default=_to_json)
        sink.write("\n")
    os.replace(tmp, path)
    return path


def write_manifest(
    run_dir: str | os.PathLike[str],
    config: Mapping[str, Any],
    seeds: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Writes ``run_dir/manifest.json``.

    Args:
        run_dir: the run's output folder (created if missing).
        config: the experiment config as a plain dict.
        seeds: every seed the run uses, by name.
        extra: further entries, stored under ``"extra"``.

    Returns:
        The manifest path. Its keys: config, seeds, versions, git_revision, hostname,
        start_time (UTC, ISO 8601), extra.
    """
    manifest = {
        "config": dict(config),
        "seeds": dict(seeds),
        "versions": package_versions(),
        "git_revision": git_revision(),
        "hostname": socket.gethostname(),
        "start_time": dt.datetime.now(dt.timezone.utc).isoformat(),
        "extra": dict(extra or {}),
    }
    return write_json(Path(run_dir) / MANIFEST_NAME, manifest)


def record_resume(run_dir: str | os.PathLike[str], from_round: int, config: Mapping[str, Any]) -> Path:
    """Appends to the manifest's ``resumes`` when, where and with which runtime settings a run was
    continued from its checkpoint at ``from_round``."""
    path = Path(run_dir) / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    manifest.setdefault("resumes", []).append({
        "from_round": from_round, "time": dt.datetime.now(dt.timezone.utc).isoformat(),
        "hostname": socket.gethostname(), "git_revision": git_revision(),
        "backend": config.get("backend"), "torch_threads": config.get("torch_threads"),
    })
    return write_json(path, manifest)
