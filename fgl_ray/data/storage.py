"""Where PyG may write: the dataset root itself, or a writable cache copy of its folders.

PyG writes ``processed/`` next to ``raw/``. A shared, read-only root (for example an offline
mirror) is therefore never handed to PyG directly: only the folders a load needs are copied,
once, into a cache and PyG processes them there.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

from fgl_ray.data.types import default_data_dir

CACHE_ENV = "FGL_CACHE_DIR"


def resolve_cache_dir() -> Path:
    """The writable cache for copies of read-only roots: ``$FGL_CACHE_DIR`` or ``~/.cache/fgl-ray/cache``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else default_data_dir().parent / "cache"


def is_writable(path: Path) -> bool:
    """Whether PyG could write at ``path`` (or create it below its nearest existing folder).

    A folder whose permission bits grant no write access counts as read-only even for a
    user who could override them (root), so a shared read-only mirror is never modified.
    """
    existing = Path(path)
    while not existing.exists():
        existing = existing.parent
    return os.access(existing, os.W_OK) and bool(existing.stat().st_mode & 0o222)


def writable_root(root: Path, subdirs: Sequence[str], cache_dir: Path) -> Path:
    """Returns a root with the same layout as ``root`` in which PyG may write ``subdirs``.

    Args:
        root: the dataset root in PyG layout; may be read-only or not exist yet.
        subdirs: folders below ``root`` that the load reads and writes (``Twitch/DE``).
        cache_dir: where read-only folders are copied to.

    Returns:
        ``root`` itself when it is writable (PyG downloads missing files as usual), else a
        cache folder holding copies of ``subdirs`` only.

    Raises:
        FileNotFoundError: a folder is missing from a read-only root.
    """
    root = Path(root).expanduser()
    if all(is_writable(root / subdir) for subdir in subdirs):
        root.mkdir(parents=True, exist_ok=True)
        return root
    mirror = Path(cache_dir).expanduser() / _mirror_name(root)
    for subdir in subdirs:
        source = root / subdir
        if not source.is_dir():
            raise FileNotFoundError(
                f"{source} is missing and {root} is read-only, so PyG cannot download it there; "
                f"point --data-dir (or FGL_DATA_DIR) at a writable folder or add the files to {root}"
            )
        _copy_once(source, mirror / subdir)
    return mirror


def _mirror_name(root: Path) -> str:
    digest = hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:8]
    return f"{root.name or 'root'}-{digest}"


def _copy_once(source: Path, target: Path) -> None:
    """Copies ``source`` to ``target`` unless a complete copy is already there."""
    if _is_complete_copy(source, target):
        return
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging, copy_function=shutil.copyfile)
    for folder, _, _ in os.walk(staging):
        os.chmod(folder, os.stat(folder).st_mode | stat.S_IWUSR)
    try:
        staging.rename(target)
    except OSError:  # another process finished the same copy first
        shutil.rmtree(staging, ignore_errors=True)
        if not _is_complete_copy(source, target):
            raise


def _is_complete_copy(source: Path, target: Path) -> bool:
    if not target.is_dir():
        return False
    for path in source.rglob("*"):
        if path.is_file():
            copy = target / path.relative_to(source)
            if not copy.is_file() or copy.stat().st_size != path.stat().st_size:
                return False
    return True
