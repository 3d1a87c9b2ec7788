"""The floor of a peer hop on this machine: what the kernel alone charges for moving a block
over loopback TCP, with no HTTP and no Python per byte.

Three cells, each timing the CPU of one thread (time.thread_time) that moves `--blocks`
blocks of `--size` over loopback sockets, the other ends in child processes:

  send           a node's local hit: one send of the block to a reader
  relay-copy     the node in the middle of a peer hop: receive the block into a reused
                 buffer, copy it out (the range client's bytes), send it on
  relay-splice   the same relay with no copy through user space (socket -> pipe -> socket)

A hop costs the fleet the owner's send plus the middle node's relay, so
(send + relay) / send is the least a read through a peer can cost against a local hit,
whatever the gateway does above the kernel (issue 13 asks for at most 1.5x).

    .venv/bin/python bench/hop_floor.py                  # 1 MiB blocks, 3 rounds
    .venv/bin/python bench/hop_floor.py --size 64KiB --blocks 20000
"""

from __future__ import annotations

import argparse
import fcntl
import os
import socket
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cache_serving as cs

_F_SETPIPE_SZ = 1031


def _pair() -> tuple[socket.socket, socket.socket]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        near = socket.create_connection(listener.getsockname())
        far, _ = listener.accept()
    return near, far


def _child(work: Callable[[], None], *close: socket.socket) -> int:
    pid = os.fork()
    if pid == 0:
        for sock in close:
            sock.close()
        try:
            work()
        finally:
            os._exit(0)
    return pid


def _sink(sock: socket.socket, size: int) -> Callable[[], None]:
    def drain() -> None:
        buffer = bytearray(size)
        while sock.recv_into(buffer):
            pass
    return drain


def _source(sock: socket.socket, block: bytes, blocks: int) -> Callable[[], None]:
    def send() -> None:
        for _ in range(blocks):
            sock.sendall(block)
        sock.shutdown(socket.SHUT_WR)
    return send


def send_cell(block: bytes, blocks: int) -> float:
    """CPU seconds of the thread that sends every block to a reader."""
    out, reader = _pair()
    pid = _child(_sink(reader, len(block)), out)
    reader.close()
    started = time.thread_time()
    for _ in range(blocks):
        out.sendall(block)
    spent = time.thread_time() - started
    out.close()
    os.waitpid(pid, 0)
    return spent


def relay_cell(block: bytes, blocks: int, splice: bool) -> float:
    """CPU seconds of the thread that receives every block from an owner and sends it on."""
    owner_out, inbound = _pair()
    outbound, reader = _pair()
    owner = _child(_source(owner_out, block, blocks), inbound, outbound, reader)
    drain = _child(_sink(reader, len(block)), owner_out, inbound, outbound)
    owner_out.close()
    reader.close()
    started = time.thread_time()
    if splice:
        _relay_splice(inbound, outbound, len(block))
    else:
        _relay_copy(inbound, outbound, len(block))
    spent = time.thread_time() - started
    inbound.close()
    outbound.close()
    os.waitpid(owner, 0)
    os.waitpid(drain, 0)
    return spent


def _relay_copy(inbound: socket.socket, outbound: socket.socket, size: int) -> None:
    view = memoryview(bytearray(size))
    while True:
        got = 0
        while got < size and (n := inbound.recv_into(view[got:])):
            got += n
        if not got:
            return
        outbound.sendall(view[:got].tobytes())


def _relay_splice(inbound: socket.socket, outbound: socket.socket, size: int) -> None:
    read_end, write_end = os.pipe()
    try:
        fcntl.fcntl(write_end, _F_SETPIPE_SZ, max(size, 65536))
        while moved := os.splice(inbound.fileno(), write_end, size, flags=os.SPLICE_F_MOVE):
            while moved:
                moved -= os.splice(read_end, outbound.fileno(), moved, flags=os.SPLICE_F_MOVE)
    finally:
        os.close(read_end)
        os.close(write_end)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="1MiB", help="block size")
    parser.add_argument("--blocks", type=int, default=2000, help="blocks moved per cell")
    parser.add_argument("--rounds", type=int, default=3, help="each cell this many times, alternating")
    args = parser.parse_args(argv)
    size = cs.parse_size(args.size, "--size")
    block = os.urandom(size)
    print(f"bench/hop_floor.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(f"machine: {cs.machine()}; load average at start: {os.getloadavg()[0]:.2f}")
    cells: dict[str, list[float]] = {"send": [], "relay-copy": [], "relay-splice": []}
    for _ in range(args.rounds):
        cells["send"].append(send_cell(block, args.blocks))
        cells["relay-copy"].append(relay_cell(block, args.blocks, splice=False))
        cells["relay-splice"].append(relay_cell(block, args.blocks, splice=True))
    per_block = {name: [1e6 * spent / args.blocks for spent in runs] for name, runs in cells.items()}
    for name, runs in per_block.items():
        print(f"  {name:13} {statistics.median(runs):8.1f} CPU us per {args.size} block "
              f"(runs: {', '.join(f'{r:.0f}' for r in runs)})")
    send = statistics.median(per_block["send"])
    for relay in ("relay-copy", "relay-splice"):
        print(f"  a hop with {relay}: (send + relay) / send = {(send + statistics.median(per_block[relay])) / send:.2f}x")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
