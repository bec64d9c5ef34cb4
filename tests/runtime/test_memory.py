"""Freed heap memory goes back to the OS after partitions are built or dropped."""

import platform

import psutil
import pytest

from fgl_ray.runtime.memory import return_freed_memory


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_small_allocations_leave_the_process():
    process = psutil.Process()
    before = process.memory_full_info().uss
    chunks = [bytearray(4000) for _ in range(50_000)]   # 200 MB of small blocks, below mmap's threshold
    del chunks[:-1]                                      # the last keeps the heap's top in use
    assert return_freed_memory()
    assert process.memory_full_info().uss - before < 50e6
