"""The node's invalidation journal (gateway.node.journal): records round-trip for any key, a
reader never misses an invalidation whatever the interleaving (it applies it or purges),
and workers in separate processes append and catch up on one file at once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.node.journal import HEADER, SLOT, Journal

ROOT = Path(__file__).resolve().parents[2]
Record = tuple[str, "str | None"] | str  # (bucket, key) applied, or "purge"


class Reader:
    """A Journal and what its catch-ups applied."""

    def __init__(self, path: Path, slots: int) -> None:
        self.journal = Journal(str(path), slots=slots)
        self.applied: list[Record] = []

    def catch_up(self) -> list[Record]:
        before = len(self.applied)
        self.journal.catch_up(lambda bucket, key: self.applied.append((bucket, key)),
                              lambda: self.applied.append("purge"))
        return self.applied[before:]


@pytest.fixture
def path(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "journal"


surrogate_escaped = st.binary(max_size=40).map(lambda b: b.decode("utf-8", "surrogateescape"))
keys = st.one_of(st.text(max_size=50), st.text(min_size=300, max_size=1100), surrogate_escaped,
                 st.lists(st.one_of(st.text(max_size=5), surrogate_escaped)).map("".join))
buckets = st.one_of(st.text(min_size=1, max_size=63), surrogate_escaped)


@settings(max_examples=300)
@given(bucket=buckets, key=st.one_of(st.none(), keys))
def test_a_record_round_trips_and_a_key_too_long_for_one_becomes_its_bucket(tmp_path_factory, bucket, key):
    path = tmp_path_factory.mktemp("j") / "journal"
    with Journal(str(path), slots=4) as writer, Journal(str(path), slots=4) as reader:
        writer.append(bucket, key)
        got: list[Record] = []
        reader.catch_up(lambda b, k: got.append((b, k)), lambda: got.append("purge"))
    if not _canonical(bucket):  # no request names it: everything is forgotten
        assert got == ["purge"]
        return
    fits = key is not None and _canonical(key) and \
        len(bucket.encode("utf-8", "surrogateescape") + key.encode("utf-8", "surrogateescape")) <= SLOT - 24
    assert got == [(bucket, key if fits else None)]


def _canonical(name: str) -> bool:
    """Whether `name` is what some bytes decode to with surrogateescape (as requests' keys are)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape") == name


def test_kinds_of_record(path: Path):
    writer, reader = Reader(path, 8), Reader(path, 8)
    writer.journal.append("b", "k")
    writer.journal.append("b")
    writer.journal.append_purge()
    writer.journal.append("b", "x" * 1200)  # too long: the whole bucket
    writer.journal.append("b", "\ud800")  # no request's bytes decode to it: the whole bucket
    writer.journal.append("b", "\udcc3\udca9")  # escaped bytes that are UTF-8 ("é"): the whole bucket
    writer.journal.append("b" * 2000, "k")  # a bucket too long for a record: everything
    assert reader.catch_up() == [("b", "k"), ("b", None), "purge", ("b", None), ("b", None), ("b", None), "purge"]
    assert reader.catch_up() == []
    assert writer.catch_up() == []  # its own records: it applied them before appending
    assert reader.journal.stats["journal_applied"] == 7 and writer.journal.stats["journal_appended"] == 7
    writer.journal.close(), reader.journal.close()


def test_an_all_zero_file_is_empty_and_a_journal_opened_later_starts_at_its_end(path: Path):
    path.write_bytes(bytes(HEADER + 4 * SLOT))
    first = Reader(path, 4)
    assert first.catch_up() == []
    first.journal.append("b", "before")
    late = Reader(path, 4)
    first.journal.append("b", "after")
    assert late.catch_up() == [("b", "after")]
    first.journal.close(), late.journal.close()


def test_a_file_of_another_size_is_refused(path: Path):
    path.write_bytes(b"x" * 100)
    with pytest.raises(ValueError, match="not the"):
        Journal(str(path), slots=4)


def test_a_reader_behind_by_more_than_the_ring_purges(path: Path):
    writer, reader = Reader(path, 4), Reader(path, 4)
    for i in range(4):
        writer.journal.append("b", str(i))
    assert reader.catch_up() == [("b", "0"), ("b", "1"), ("b", "2"), ("b", "3")]  # the whole ring: still there
    for i in range(5):
        writer.journal.append("b", str(i))
    assert reader.catch_up() == ["purge"]
    assert reader.journal.stats["journal_resyncs"] == 1
    writer.journal.append("b", "next")
    assert reader.catch_up() == [("b", "next")]
    writer.journal.close(), reader.journal.close()


def test_a_record_overwritten_before_it_is_read_is_a_purge(path: Path):
    writer, reader = Reader(path, 4), Journal(str(path), slots=4)
    for i in range(3):
        writer.journal.append("b", str(i))
    got: list[Record] = []

    def apply(bucket: str, key: str | None) -> None:
        got.append((bucket, key))
        if key == "0":  # while the reader is between records, the ring turns over
            for i in range(4):
                writer.journal.append("b", f"later{i}")

    reader.catch_up(apply, lambda: got.append("purge"))
    assert got == [("b", "0"), "purge"]
    got.clear()
    reader.catch_up(apply, lambda: got.append("purge"))
    assert got == [("b", f"later{i}") for i in range(4)]
    writer.journal.close(), reader.close()


def test_a_corrupt_record_is_a_purge(path: Path):
    writer, reader = Reader(path, 4), Reader(path, 4)
    writer.journal.append("bucket", "key")
    with path.open("r+b") as f:  # record 1 is in slot 1
        f.seek(HEADER + SLOT + 30)
        f.write(b"X")
    assert reader.catch_up() == ["purge"]
    writer.journal.close(), reader.journal.close()


operations = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(0, 2), st.sampled_from(["a", "b"]), st.one_of(st.none(), st.sampled_from("xyz"))),
    st.tuples(st.just("purge"), st.integers(0, 2)),
    st.tuples(st.just("catch_up"), st.integers(0, 2)),
    st.tuples(st.just("reopen"), st.integers(0, 2)),
), max_size=60)


@settings(max_examples=300)
@given(ops=operations)
def test_a_reader_never_misses_an_invalidation(tmp_path_factory, ops):
    """Three journals on one small ring, any interleaving: each catch-up applies, in order,
    every record the others appended since the reader opened (its own it may apply again:
    harmless), or purges; nothing it applies was never appended."""
    path = tmp_path_factory.mktemp("j") / "journal"
    readers = [Reader(path, 3) for _ in range(3)]
    pending: list[list[Record]] = [[], [], []]  # appended by the others, not applied yet
    appended: set[Record] = set()
    try:
        for op in [*ops, *[("catch_up", i) for i in range(3)]]:
            who = op[1]
            if op[0] in ("append", "purge"):
                record: Record = (op[2], op[3]) if op[0] == "append" else "purge"  # type: ignore[misc]
                if record == "purge":
                    readers[who].journal.append_purge()
                else:
                    readers[who].journal.append(*record)  # type: ignore[arg-type]
                appended.add(record)
                for other in range(3):
                    if other != who:
                        pending[other].append(record)
            elif op[0] == "reopen":
                readers[who].journal.close()
                readers[who] = Reader(path, 3)
                pending[who] = []
            else:
                resyncs = readers[who].journal.stats["journal_resyncs"]
                got = readers[who].catch_up()
                assert set(got) - {"purge"} <= appended
                if readers[who].journal.stats["journal_resyncs"] == resyncs:  # no purge for records lost
                    assert _in_order(pending[who], got), (pending[who], got)
                else:
                    assert got[-1] == "purge"
                pending[who] = []
        assert pending == [[], [], []]
    finally:
        for reader in readers:
            reader.journal.close()


def _in_order(expected: list[Record], got: list[Record]) -> bool:
    """Whether `expected` is a subsequence of `got` (which may hold the reader's own records too)."""
    rest = iter(got)
    return all(any(record == seen for seen in rest) for record in expected)


_WRITER = """
import sys
from gateway.node.journal import Journal
path, slots, name, count, when = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
if when == "after-go":
    sys.stdin.readline()
with Journal(path, slots=slots) as journal:
    print("open", flush=True)
    if when == "before-go":
        sys.stdin.readline()
    for n in range(count):
        journal.append(name, f"{n:06d}/" + "k" * (n % 700))
"""


def start_writers(path: Path, slots: int, count: int, writers: int, when: str) -> list[subprocess.Popen[str]]:
    return [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(slots), f"w{i}", str(count), when],
                             cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for i in range(writers)]


def release(writers: list[subprocess.Popen[str]]) -> None:
    for writer in writers:
        assert writer.stdin is not None
        writer.stdin.write("go\n")
        writer.stdin.close()


def finish(writers: list[subprocess.Popen[str]]) -> None:
    """Wait for the writers to end (killed if they do not within 30 s); they all succeeded."""
    for writer in writers:
        try:
            writer.wait(30)
        except subprocess.TimeoutExpired:
            writer.kill()
            writer.wait(10)
        assert writer.stdout is not None
        writer.stdout.close()
    assert all(w.returncode == 0 for w in writers)


@pytest.mark.parametrize("slots", [8192, 16], ids=["roomy-ring", "tiny-ring"])
def test_processes_append_while_another_catches_up(path: Path, slots: int):
    """Two writer processes append 3000 records each, at once, while this one catches up.
    A ring that holds them all loses none: every record is applied once, each writer's in
    order. A ring of 16 turns over under the reader: it purges, and still applies nothing
    torn (each record whole, each writer's in order)."""
    count = 3000
    reader = Reader(path, slots)
    writers = start_writers(path, slots, count, 2, "before-go")
    try:
        for writer in writers:
            assert writer.stdout is not None and writer.stdout.readline() == "open\n"
        release(writers)
        deadline = time.monotonic() + 60
        while any(w.poll() is None for w in writers):
            assert time.monotonic() < deadline, "the writers did not finish"
            reader.catch_up()
        reader.catch_up()  # the writers are gone: everything is published
    finally:
        finish(writers)
        reader.journal.close()
    purges = reader.applied.count("purge")
    seen: dict[str, list[int]] = {"w0": [], "w1": []}
    for record in reader.applied:
        if record != "purge":
            bucket, key = record  # type: ignore[misc]
            assert key is not None
            number, filler = key.split("/")
            assert filler == "k" * (int(number) % 700), "a torn record"
            seen[bucket].append(int(number))
    for numbers in seen.values():
        assert numbers == sorted(set(numbers)), numbers[:20]  # in order, none twice
    if slots == 8192:
        assert purges == 0 and seen == {"w0": list(range(count)), "w1": list(range(count))}
    else:
        assert purges > 0


def test_workers_opening_the_journal_at_once_share_one(path: Path):
    """Four processes create and open the same journal at the same moment and append 50
    records each: no open clobbers another's records."""
    writers = start_writers(path, 64, 50, 4, "after-go")
    try:
        release(writers)
        for writer in writers:
            assert writer.stdout is not None and writer.stdout.readline() == "open\n"
    finally:
        finish(writers)
    assert os.path.getsize(path) == HEADER + 64 * SLOT
    assert int.from_bytes(path.read_bytes()[:8], sys.byteorder) == 200  # the last sequence number
