"""gateway.run.keep_large_allocations: a gateway process reuses the memory of freed blocks
instead of faulting in fresh pages for each (glibc's malloc), which was most of the CPU of a
1 MiB disk-tier hit (docs/benchmarks.md)."""

from __future__ import annotations

import subprocess
import sys

import pytest

COPIES = 200
PROGRAM = f"""
import os, resource, sys
import gateway.run
if sys.argv[1] == "tuned":
    gateway.run.keep_large_allocations()
block = os.urandom(1 << 20)
for _ in range(10):  # the heap grows to its working size first
    bytes(bytearray(block))
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range({COPIES}):
    bytes(bytearray(block))  # two fresh 1 MiB buffers, as a block read from a file takes
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults_per_copy(mode: str) -> float:
    done = subprocess.run([sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, check=True)
    return int(done.stdout) / COPIES


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc is what is tuned")
def test_a_tuned_process_copies_blocks_without_faulting_in_fresh_pages() -> None:
    untuned = faults_per_copy("default")
    if untuned < 16:
        pytest.skip(f"this C library's malloc reuses large allocations by itself ({untuned:.1f} faults per copy)")
    assert faults_per_copy("tuned") < 4  # against ~160 (of the 512 pages copied) untuned, with glibc 2.36
