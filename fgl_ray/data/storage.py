"""Where PyG may write: fgl-ray's own download folder, or a cache copy of a named root's folders.

PyG writes ``processed/`` next to ``raw/``. A root the user names (a shared mirror, a folder
of their own) is therefore never handed to PyG: only the folders a load needs are copied, once
and atomically (staged, then renamed), into a cache and PyG processes them there, under the
per-dataset lock of :func:`fgl_ray.data.datasets.processing_lock`.
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


def writable_root(root: Path, subdirs: Sequence[str], cache_dir: Path) -> Path:
    """Returns a root with the same layout as ``root`` in which PyG may write ``subdirs``.

    Args:
        root: the dataset root in PyG layout.
        subdirs: folders below ``root`` that the load reads and writes (``Twitch/DE``).
        cache_dir: where the folders of a named root are copied to.

    Returns:
        ``root`` itself only when it is fgl-ray's own download folder (``default_data_dir()``,
        where PyG downloads missing files as usual). A root the user names (``--data-dir``,
        ``FGL_DATA_DIR``) is never written, whatever its permissions: the folders a load needs
        are copied, once, into ``cache_dir`` (a folder per root, the dataset's path below it)
        and PyG processes them there.

    Raises:
        FileNotFoundError: a folder is missing from a named root.
    """
    root = Path(root).expanduser()
    if root.resolve() == default_data_dir().resolve():
        root.mkdir(parents=True, exist_ok=True)
        return root
    mirror = Path(cache_dir).expanduser() / _mirror_name(root)
    for subdir in subdirs:
        source = root / subdir
        if not source.is_dir():
            raise FileNotFoundError(
                f"{source} is missing, and fgl-ray never writes into a data root you name, so it cannot "
                f"download it there: add the files to {root}, or leave --data-dir and FGL_DATA_DIR unset to "
                f"download into {default_data_dir()}"
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
