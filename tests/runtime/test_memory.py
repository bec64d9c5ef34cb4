"""Freed heap memory goes back to the OS after partitions are built or dropped."""

import platform
import subprocess
import sys

import pytest

#: Allocates 200 MB in small blocks (below mmap's threshold, so on the heap), frees all but the
#: last (which keeps the heap's top in use) and prints how much of it the process still holds.
PROBE = """
import psutil
from fgl_ray.runtime.memory import return_freed_memory
process = psutil.Process()
before = process.memory_full_info().uss
chunks = [bytearray(4000) for _ in range(50_000)]
del chunks[:-1]
trimmed = {trim}
if trimmed:
    assert return_freed_memory()
print(process.memory_full_info().uss - before)
"""


def _held_after_free(trim: bool) -> int:
    """Bytes still held, measured in a fresh process (a long-lived one's heap is already fragmented)."""
    out = subprocess.run([sys.executable, "-c", PROBE.format(trim=trim)], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_small_allocations_leave_the_process():
    assert _held_after_free(trim=False) > 150e6      # glibc keeps what was freed...
    assert _held_after_free(trim=True) < 50e6        # ...until it is asked to give it back
