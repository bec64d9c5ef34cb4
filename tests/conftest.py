"""Shared fixtures: one session-scoped Ray, the shared datasets folder, tiny federations."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATASETS = (REPO / ".." / "shared" / "datasets").resolve()

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


@pytest.fixture(scope="session")
def shared_datasets() -> Path:
    """The read-only real datasets beside the repository; skips when absent."""
    if not SHARED_DATASETS.is_dir():
        pytest.skip(f"real datasets not found at {SHARED_DATASETS} (CI provides ../shared/datasets)")
    return SHARED_DATASETS


@pytest.fixture(scope="session")
def ray_session():
    """One Ray for the whole test session (ray.init costs seconds)."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="class")
def warm_workers(ray_session):
    """Client workers that a test class's Ray runs borrow in turn, as a Simulator's runs do (a fresh
    worker costs seconds of imports). They hold their CPUs while idle, so they end with the class,
    before any other test starts workers of its own."""
    from fgl_ray.runtime.ray_backend import OwnWorkers

    pool = OwnWorkers()
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Dataset caches and results go to temporary folders, never the user's home."""
    cache = tmp_path_factory.getbasetemp() / "fgl-cache"
    monkeypatch.setenv("FGL_CACHE_DIR", str(cache))
