"""manifest.json contents and JSON conversion."""

from __future__ import annotations

import importlib.metadata
import json
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

import fgl_ray
from fgl_ray.results import manifest
from fgl_ray.results.manifest import write_manifest


def test_manifest_contents(tmp_path: Path) -> None:
    config = {"data_dir": Path("/data/twitch"), "shape": (3, 4), "tags": {"b", "a"}}
    seeds = {"global": np.int64(7), "partition": 3}
    path = write_manifest(tmp_path / "run", config, seeds, extra={"run_id": "r1"})
    loaded = json.loads(path.read_text())
    assert path.name == "manifest.json"
    assert loaded["config"] == {"data_dir": "/data/twitch", "shape": [3, 4], "tags": ["a", "b"]}
    assert loaded["seeds"] == {"global": 7, "partition": 3}
    assert loaded["extra"] == {"run_id": "r1"}
    versions = loaded["versions"]
    assert versions["python"] == platform.python_version()
    assert versions["numpy"] == importlib.metadata.version("numpy")
    assert versions["fgl_ray"] is not None
    assert set(versions) >= {"torch", "torch_geometric", "ray", "pyarrow"}
    assert loaded["hostname"] and loaded["start_time"]


def test_manifest_does_not_import_ray(tmp_path: Path) -> None:
    code = (
        "import sys; from fgl_ray.results import write_manifest;"
        f"write_manifest({str(tmp_path)!r}, {{}}, {{}}); assert 'ray' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(fgl_ray.__file__).parents[1])


def test_git_revision_matches_git_or_is_none() -> None:
    package_dir = Path(fgl_ray.__file__).resolve().parent
    done = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=package_dir, capture_output=True, text=True
    )
    expected = done.stdout.strip() if done.returncode == 0 else None
    assert manifest.git_revision() == expected


def test_git_revision_is_none_without_git(monkeypatch) -> None:
    def missing(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(manifest.subprocess, "run", missing)
    assert manifest.git_revision() is None
