"""The CPU a block file written to a folder costs, per MiB: what a node of several workers pays for
each block a cold read brings (its memory tier is files on tmpfs, store.shared). Compare /dev/shm
with a tmpfs mounted with huge=within_size, where the kernel gives the files large folios:

    mount -t tmpfs -o size=2g,huge=within_size tmpfs /run/s3gw-huge
    python bench/tmpfs_writes.py /dev/shm /run/s3gw-huge

Each round writes --files new files of --size random bytes (one write each, as store.blockfile
writes a block), then deletes them; printed: the CPU (this process, user and system) per MiB of
each round.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time


def round_of(folder: str, files: int, data: bytes) -> float:
    """CPU ms per MiB of writing `files` new files of `data`."""
    started = time.process_time()
    for number in range(files):
        fd = os.open(os.path.join(folder, f"block-{number}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    spent = time.process_time() - started
    for number in range(files):
        os.unlink(os.path.join(folder, f"block-{number}"))
    return spent * 1e3 / (files * len(data) / (1 << 20))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", help="where to write (each on the file system to measure)")
    parser.add_argument("--files", type=int, default=300, help="files per round")
    parser.add_argument("--size", type=int, default=1 << 20, help="bytes of each file (a block)")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    data = os.urandom(args.size)
    for base in args.folders:
        folder = tempfile.mkdtemp(prefix="tmpfs-writes-", dir=base)
        try:
            rounds = [round_of(folder, args.files, data) for _ in range(args.rounds)]
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        print(f"{base}: " + ", ".join(f"{ms:.3f}" for ms in rounds) + " ms of CPU per MiB written", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
