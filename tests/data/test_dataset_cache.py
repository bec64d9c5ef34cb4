"""Named dataset roots are never written: what a load needs is copied (once) into the cache."""

import os
import stat

import pytest

from fgl_ray.data.storage import resolve_cache_dir, writable_root


@pytest.fixture
def read_only_root(tmp_path):
    root = tmp_path / "datasets"
    for name in ("DE", "EN"):
        raw = root / "Twitch" / name / "raw"
        raw.mkdir(parents=True)
        (raw / f"{name}.npz").write_bytes(b"x" * 64)
    for folder, _, files in os.walk(root):
        for name in files:
            os.chmod(os.path.join(folder, name), 0o444)
        os.chmod(folder, 0o555)
    yield root
    for folder, _, _ in os.walk(root):
        os.chmod(folder, 0o755)


def test_only_the_default_download_folder_is_used_in_place(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    from fgl_ray.data.types import default_data_dir

    assert writable_root(default_data_dir(), ["Twitch/DE"], tmp_path / "cache") == default_data_dir()
    assert default_data_dir().is_dir()


def test_a_writable_named_root_is_not_written_either(tmp_path):
    root = tmp_path / "mine"
    (root / "Twitch" / "DE" / "raw").mkdir(parents=True)
    (root / "Twitch" / "DE" / "raw" / "DE.npz").write_bytes(b"x" * 8)
    mirror = writable_root(root, ["Twitch/DE"], tmp_path / "cache")
    assert (tmp_path / "cache") in mirror.parents
    (mirror / "Twitch" / "DE" / "processed").mkdir()                     # PyG's output lands in the copy
    assert sorted(p.name for p in (root / "Twitch" / "DE").iterdir()) == ["raw"]


def test_read_only_root_copies_only_the_needed_folder_once(read_only_root, tmp_path):
    cache = tmp_path / "cache"
    mirror = writable_root(read_only_root, ["Twitch/DE"], cache)
    assert cache in mirror.parents
    copy = mirror / "Twitch" / "DE"
    assert (copy / "raw" / "DE.npz").read_bytes() == (read_only_root / "Twitch/DE/raw/DE.npz").read_bytes()
    assert not (mirror / "Twitch" / "EN").exists()
    assert os.stat(copy).st_mode & stat.S_IWUSR, "PyG must be able to write processed/ into the copy"
    marker = copy / "processed"
    marker.mkdir()
    assert writable_root(read_only_root, ["Twitch/DE"], cache) == mirror
    assert marker.is_dir(), "a complete copy is reused, not copied again"


def test_incomplete_copy_is_replaced(read_only_root, tmp_path):
    mirror = writable_root(read_only_root, ["Twitch/DE"], tmp_path / "cache")
    (mirror / "Twitch/DE/raw/DE.npz").write_bytes(b"short")
    writable_root(read_only_root, ["Twitch/DE"], tmp_path / "cache")
    assert (mirror / "Twitch/DE/raw/DE.npz").stat().st_size == 64


def test_missing_folder_in_read_only_root_is_a_clear_error(read_only_root, tmp_path):
    with pytest.raises(FileNotFoundError, match="never writes into a data root you name"):
        writable_root(read_only_root, ["Twitch/FR"], tmp_path / "cache")


def test_cache_dir_follows_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("FGL_CACHE_DIR", str(tmp_path / "c"))
    assert resolve_cache_dir() == tmp_path / "c"


def _spec(load, files=("Some/raw/file.bin",)):
    from fgl_ray.data.types import DatasetSpec

    return DatasetSpec(name="some", task="node", domains=("some",), default_split=(0.6, 0.2, 0.2), load=load,
                       files=files)


def test_a_download_that_fails_is_one_clear_error(tmp_path):
    from fgl_ray.data.datasets import load_spec
    from fgl_ray.data.types import DatasetUnavailable

    def offline_download(root, cache_dir):
        raise ConnectionError("Cannot connect to host github.com:443")

    with pytest.raises(DatasetUnavailable, match=r"'some' is not under .* and fetching it failed \(ConnectionError"):
        load_spec(_spec(offline_download), tmp_path, tmp_path / "cache")


def test_unreadable_files_are_named_as_possibly_corrupt(tmp_path):
    from fgl_ray.data.datasets import load_spec
    from fgl_ray.data.types import DatasetUnavailable

    (tmp_path / "Some" / "raw").mkdir(parents=True)
    (tmp_path / "Some" / "raw" / "file.bin").write_bytes(b"\x00truncated")

    def parse(root, cache_dir):
        raise ValueError("cannot reshape array of size 3")

    with pytest.raises(DatasetUnavailable, match=r"Some/raw/file.bin\) may be corrupt or truncated") as error:
        load_spec(_spec(parse), tmp_path, tmp_path / "cache")
    assert isinstance(error.value.__cause__, ValueError)


def test_a_loader_bug_on_missing_files_is_not_disguised(tmp_path):
    from fgl_ray.data.datasets import load_spec

    def broken(root, cache_dir):
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        load_spec(_spec(broken), tmp_path, tmp_path / "cache")


def test_a_second_load_of_the_same_dataset_waits_for_the_first(tmp_path):
    import threading
    import time

    from fgl_ray.data.datasets import load_spec, processing_lock

    finished = []
    spec = _spec(lambda root, cache_dir: finished.append(time.monotonic()), files=())
    with processing_lock(tmp_path / "cache", "some"):
        worker = threading.Thread(target=load_spec, args=(spec, tmp_path, tmp_path / "cache"))
        worker.start()
        time.sleep(0.5)
        assert not finished                                             # blocked while another holds it
        released = time.monotonic()
    worker.join(timeout=10)
    assert finished and finished[0] >= released
