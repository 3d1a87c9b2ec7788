"""`gateway load --table iceberg|delta`, `--partitions`, `--footers`, `--plan` against moto: tables
written by hand (tests/tables/writers.py) behind the gateway; what the origin is asked for, key by
key, shows that only the current snapshot's files (or their footers) are read."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pyarrow.orc as orc
import pytest
from click.testing import CliRunner, Result

from gateway.admin.load import kept_apart
from gateway.admin.summary import size
from gateway.cli import main
from gateway.config import AdminSettings, CacheSettings
from gateway.tables.footers import TAIL, footer_ranges
from tests.support import RunningGateway, client
from tests.tables.orcfile import orc_file
from tests.tables.writers import (avro, delta_add, delta_checkpoint, delta_commit, delta_remove, iceberg_metadata, manifest,
                                  manifest_list, parquet_file)

TOKEN = "table-load-token"
KiB = 1024
MiB = 1024 * KiB
BLOCK = 64 * KiB
ICEBERG = "lake/sales"
DELTA = "lake/events"


class OriginLog:
    """(method, key, Range) of every request the gateway sends to the origin."""

    def __init__(self, gateway: RunningGateway) -> None:
        self.sent: list[tuple[str, str | None, str | None]] = []
        origin = gateway.server.config.app.s3.engine.origin
        # Every request goes through one of the two: aiohttp's (`send`), or the range client's
        # (`_buffered`: blocks, runs, HEADs and listing pages).
        send, buffered = origin.send, origin._buffered

        async def sent(method: str, bucket: str | None = None, key: str | None = None, **kwargs: Any) -> Any:
            self.sent.append((method, key, (kwargs.get("headers") or {}).get("range")))
            return await send(method, bucket, key, **kwargs)

        async def sent_buffered(method: str, bucket: str, key: str | None, query: Any, headers: dict[str, str]) -> Any:
            self.sent.append((method, key, headers.get("range")))
            return await buffered(method, bucket, key, query, headers)

        origin.send, origin._buffered = sent, sent_buffered  # type: ignore[method-assign]

    def keys(self, under: str = "") -> set[str]:
        return {key for method, key, _ in self.sent if method == "GET" and key and key.startswith(under)}

    def ranged_bytes(self, key: str, size: int) -> int:
        """Bytes the origin was asked for of `key` (an open range counted to the end)."""
        total = 0
        for method, sent_key, ranged in self.sent:
            if method == "GET" and sent_key == key:
                match = re.fullmatch(r"bytes=(\d*)-(\d*)", ranged or "")
                if match is None:
                    total += size
                elif not match.group(1):
                    total += min(size, int(match.group(2)))
                else:
                    total += min(size, int(match.group(2) or size - 1) + 1) - int(match.group(1))
        return total


FILES = {name: parquet_file(rows, seed) for name, rows, seed in [
    ("a", 20_000, 0), ("b", 20_000, 1), ("c", 30_000, 2), ("d", 20_000, 3), ("orphan", 10_000, 4)]}


def iceberg_key(name: str, dt: str) -> str:
    return f"{ICEBERG}/data/dt={dt}/{name}.parquet"


@pytest.fixture
def tables(start_gateway, clean_origin, direct) -> Iterator[tuple[RunningGateway, OriginLog]]:  # type: ignore[no-untyped-def]
    """An Iceberg table of two snapshots (b deleted, d and a delete file added in the second; an
    orphan file under data/) and a Delta table of a checkpoint and commits, written behind the gateway."""
    gateway = start_gateway(admin=AdminSettings(token=TOKEN),
                            cache=CacheSettings(block_size=BLOCK, readahead_blocks=0))
    direct.create_bucket(Bucket="lake")
    put = lambda key, body: direct.put_object(Bucket="lake", Key=key, Body=body)  # noqa: E731
    days = {"a": "2026-12-01", "b": "2026-12-02", "c": "2026-12-03", "d": "2026-12-03", "orphan": "2026-12-04"}
    for name, body in FILES.items():
        put(iceberg_key(name, days[name]), body)
    put(f"{ICEBERG}/data/dt=2026-12-03/deletes.parquet", FILES["orphan"][:4096])
    loc = lambda key: f"s3://lake/{key}"  # noqa: E731
    entry = lambda status, name, content=0: (status, loc(iceberg_key(name, days[name])),  # noqa: E731
                                             len(FILES[name]), days[name], content)
    meta = f"{ICEBERG}/metadata/"
    put(meta + "m1.avro", manifest([entry(1, "a"), entry(1, "b"), entry(1, "c")]))
    put(meta + "m2.avro", manifest([entry(0, "a"), entry(2, "b"), entry(0, "c")]))
    put(meta + "m3.avro", manifest([entry(1, "d")]))
    put(meta + "m4.avro", manifest([(1, loc(f"{ICEBERG}/data/dt=2026-12-03/deletes.parquet"), 4096, "2026-12-03", 1)]))
    put(meta + "snap-1.avro", manifest_list([loc(meta + "m1.avro")]))
    put(meta + "snap-2.avro", manifest_list([loc(meta + f"m{n}.avro") for n in (2, 3, 4)]))
    put(meta + "00001-1f0c.metadata.json", iceberg_metadata(loc(ICEBERG), {1: loc(meta + "snap-1.avro")}, 1))
    put(meta + "00002-7a9e.metadata.json", iceberg_metadata(
        loc(ICEBERG), {1: loc(meta + "snap-1.avro"), 2: loc(meta + "snap-2.avro")}, 2))
    # Delta: commits 0-2 (their state in the checkpoint at 2), then commit 3 removes p2 and adds p4.
    log = f"{DELTA}/_delta_log/"
    parts = {n: FILES["abcd"[n - 1]] for n in (1, 2, 3, 4)}
    for n, body in parts.items():
        put(f"{DELTA}/day=2026-12-0{n}/part-{n}.parquet", body)
    adds = {n: delta_add(f"day=2026-12-0{n}/part-{n}.parquet", len(parts[n]), f"2026-12-0{n}") for n in parts}
    put(log + f"{0:020d}.json", b"not read: the checkpoint at 2 holds its state")
    put(log + f"{1:020d}.json", b"not read either")
    put(log + f"{2:020d}.json", b"nor this")
    put(log + f"{2:020d}.checkpoint.parquet", delta_checkpoint([adds[1], adds[2], adds[3]]))
    put(log + "_last_checkpoint", json.dumps({"version": 2, "size": 4}).encode())
    put(log + f"{3:020d}.json", delta_commit({"commitInfo": {}}, delta_remove("day=2026-12-02/part-2.parquet"),
                                             adds[4]))
    yield gateway, OriginLog(gateway)


def cli(gateway: RunningGateway, *args: str) -> Result:
    return CliRunner().invoke(main, ["load", *args, "--url", gateway.endpoint, "--token", TOKEN],
                              env={"GATEWAY_ADMIN_TOKEN": None})  # type: ignore[dict-item]


def planned(result: Result) -> dict[str, int]:
    """The plan's files as {key: size}, from the CLI's lines."""
    files = {}
    for line in result.output.splitlines():
        if "  s3://" in line:
            length, location = line.split()
            files[location.removeprefix("s3://lake/")] = int(length)
    return files


CURRENT = {iceberg_key("a", "2026-12-01"), iceberg_key("c", "2026-12-03"), iceberg_key("d", "2026-12-03"),
           f"{ICEBERG}/data/dt=2026-12-03/deletes.parquet"}


def test_iceberg_plan_lists_the_current_snapshot_and_loads_nothing(tables):
    gateway, origin = tables
    result = cli(gateway, f"s3://lake/{ICEBERG}", "--table", "iceberg", "--plan")
    assert result.exit_code == 0, result.output
    files = planned(result)
    assert set(files) == CURRENT
    assert files[iceberg_key("c", "2026-12-03")] == len(FILES["c"])
    total = sum(files.values())
    assert result.output.splitlines()[-1] == (f"plan: 4 files of the iceberg table lake/{ICEBERG}, "
                                              f"{size(total)} (found in 5 metadata files); nothing loaded")
    assert origin.keys(f"{ICEBERG}/data/") == set()  # the plan read metadata only


def test_iceberg_load_reads_exactly_the_current_files(tables):
    gateway, origin = tables
    result = cli(gateway, f"s3://lake/{ICEBERG}/", "--table", "iceberg")
    assert result.exit_code == 0, result.output
    assert "loaded 4 of 4 files of the iceberg table" in result.output
    assert origin.keys(f"{ICEBERG}/data/") == CURRENT  # not b (deleted), not the orphan
    assert origin.keys(f"{ICEBERG}/metadata/") == {f"{ICEBERG}/metadata/{name}" for name in (
        "00002-7a9e.metadata.json", "snap-2.avro", "m2.avro", "m3.avro", "m4.avro")}
    s3 = client(gateway.endpoint)
    for key in CURRENT:
        got = s3.get_object(Bucket="lake", Key=key)
        got["Body"].read()
        assert got["ResponseMetadata"]["HTTPHeaders"]["x-cache"] == "hit-mem", key


def test_an_older_snapshot_the_metadata_file_itself_and_partitions(tables):
    gateway, _ = tables
    older = planned(cli(gateway, f"s3://lake/{ICEBERG}", "--table", "iceberg", "--snapshot", "1", "--plan"))
    assert set(older) == {iceberg_key(n, d) for n, d in (("a", "2026-12-01"), ("b", "2026-12-02"),
                                                         ("c", "2026-12-03"))}
    exact = cli(gateway, f"s3://lake/{ICEBERG}/metadata/00001-1f0c.metadata.json", "--table", "iceberg", "--plan")
    assert set(planned(exact)) == set(older)
    recent = cli(gateway, f"s3://lake/{ICEBERG}", "--table", "iceberg", "--plan", "--partitions", "dt>=2026-12-02")
    assert set(planned(recent)) == {k for k in CURRENT if "2026-12-03" in k}
    listed = cli(gateway, f"s3://lake/{ICEBERG}", "--table", "iceberg", "--plan", "--partitions", "dt in (2026-12-01)")
    assert set(planned(listed)) == {iceberg_key("a", "2026-12-01")}
    gone = cli(gateway, f"s3://lake/{ICEBERG}", "--table", "iceberg", "--snapshot", "7")
    assert gone.exit_code == 1 and "snapshot 7 is not in" in gone.output


def test_partitions_over_a_plain_prefix(tables):
    gateway, origin = tables
    result = cli(gateway, f"s3://lake/{ICEBERG}/data/", "--partitions", "dt>2026-12-02", "--partitions", "dt<=2026-12-03")
    assert result.exit_code == 0, result.output
    assert "loaded 3 of 3 objects under" in result.output
    assert origin.keys(f"{ICEBERG}/data/") == {iceberg_key("c", "2026-12-03"), iceberg_key("d", "2026-12-03"),
                                              f"{ICEBERG}/data/dt=2026-12-03/deletes.parquet"}


def test_delta_loads_the_checkpoint_and_the_commits_after_it(tables):
    gateway, origin = tables
    plan = cli(gateway, f"s3://lake/{DELTA}", "--table", "delta", "--plan")
    assert set(planned(plan)) == {f"{DELTA}/day=2026-12-0{n}/part-{n}.parquet" for n in (1, 3, 4)}, plan.output
    assert origin.keys(f"{DELTA}/_delta_log/") == {f"{DELTA}/_delta_log/{2:020d}.checkpoint.parquet",
                                                   f"{DELTA}/_delta_log/{3:020d}.json"}
    older = cli(gateway, f"s3://lake/{DELTA}", "--table", "delta", "--snapshot", "2", "--plan")
    assert set(planned(older)) == {f"{DELTA}/day=2026-12-0{n}/part-{n}.parquet" for n in (1, 2, 3)}
    result = cli(gateway, f"s3://lake/{DELTA}", "--table", "delta", "--partitions", "day>=2026-12-03")
    assert result.exit_code == 0, result.output
    assert origin.keys(f"{DELTA}/day=") == {f"{DELTA}/day=2026-12-0{n}/part-{n}.parquet" for n in (3, 4)}


def test_footers_load_the_tail_and_page_indexes_only(tables):
    gateway, origin = tables
    result = cli(gateway, f"s3://lake/{ICEBERG}", "--table", "iceberg", "--footers")
    assert result.exit_code == 0, result.output
    assert "(footers), 0 ranges read before the tails" in result.output  # no page index outside the tails
    s3 = client(gateway.endpoint)
    for name, dt in (("a", "2026-12-01"), ("c", "2026-12-03"), ("d", "2026-12-03")):
        key, size = iceberg_key(name, dt), len(FILES[name])
        asked = origin.ranged_bytes(key, size)
        assert asked <= 3 * BLOCK < size // 2, (key, asked, size)  # the tail's blocks, not the file
        tail = s3.get_object(Bucket="lake", Key=key, Range="bytes=-65536")
        tail["Body"].read()
        assert tail["ResponseMetadata"]["HTTPHeaders"]["x-cache"] == "hit-mem"
        head = s3.get_object(Bucket="lake", Key=key, Range="bytes=0-99")
        head["Body"].read()
        assert head["ResponseMetadata"]["HTTPHeaders"]["x-cache"] == "miss"


class GatewayFile(io.RawIOBase):
    """An object read through the gateway as engines read it, a ranged GET a read; `caches` holds
    each answer's x-cache."""

    def __init__(self, gateway: RunningGateway, key: str, size: int) -> None:
        super().__init__()
        self.s3, self.key, self.size, self.at = client(gateway.endpoint), key, size, 0
        self.caches: list[str] = []

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self.at = offset if whence == 0 else self.at + offset if whence == 1 else self.size + offset
        return self.at

    def readinto(self, buffer: Any) -> int:
        end = min(self.at + len(buffer), self.size)
        if end <= self.at:
            return 0
        answer = self.s3.get_object(Bucket="lake", Key=self.key, Range=f"bytes={self.at}-{end - 1}")
        self.caches.append(answer["ResponseMetadata"]["HTTPHeaders"]["x-cache"])
        length = end - self.at
        buffer[:length] = answer["Body"].read()
        self.at = end
        return length


def orc_lake(start_gateway, direct, data: bytes, block: int) -> tuple[RunningGateway, OriginLog, str]:  # type: ignore[no-untyped-def]
    """A gateway of `block`-byte blocks in front of a bucket holding one ORC file, `data`."""
    gateway = start_gateway(admin=AdminSettings(token=TOKEN), cache=CacheSettings(block_size=block, readahead_blocks=0))
    direct.create_bucket(Bucket="lake")
    direct.put_object(Bucket="lake", Key="orders/part-0.orc", Body=data)
    return gateway, OriginLog(gateway), "orders/part-0.orc"


def loaded_footers(gateway: RunningGateway, origin: OriginLog, key: str, size: int) -> int:
    """`gateway load --footers` of the file: the ranges it read before the tail, checked against
    the origin's requests: the tail (one request, the size known from the listing), then one each."""
    result = cli(gateway, "s3://lake/orders/", "--footers")
    assert result.exit_code == 0, result.output
    reads = re.search(r"\(footers\), (\d+) ranges read before the tails", result.output)
    assert reads is not None, result.output
    assert len([r for method, sent_key, r in origin.sent if method == "GET" and sent_key == key]) == 1 + int(reads[1])
    return int(reads[1])


def stripes_read_through(gateway: RunningGateway, origin: OriginLog, key: str, size: int) -> list[str]:
    """pyarrow opening the file through the gateway and reading each stripe's footer (a stripe with
    no column: nothing else); no request reaches the origin. The answers' x-cache."""
    before = len(origin.sent)
    through = GatewayFile(gateway, key, size)
    reader = orc.ORCFile(through)
    for stripe in range(reader.nstripes):
        reader.read_stripe(stripe, columns=[])  # reads the stripe's footer (parses it), and nothing else
    assert origin.sent[before:] == [] and len(through.caches) == 1 + reader.nstripes
    return through.caches


def test_orc_stripe_footers_in_blocks_of_their_own_are_loaded_and_then_hits(start_gateway, clean_origin, direct):
    data = orc_file("uncompressed", rows=600_000, stripe_size=2048 * KiB)  # stripes of 1.7 MB: > the 1 MiB blocks
    gateway, origin, key = orc_lake(start_gateway, direct, data, block=1024 * KiB)
    stripes = orc.ORCFile(io.BytesIO(data)).nstripes
    assert loaded_footers(gateway, origin, key, len(data)) == stripes - 1 and stripes > 4  # the last one's in the tail
    assert origin.ranged_bytes(key, len(data)) <= 2 * (stripes + 1) * BLOCK  # 64 KiB granules: one or two a footer
    assert set(stripes_read_through(gateway, origin, key, len(data))) == {"hit-mem"}


def test_orc_stripe_footers_several_to_a_block_are_left_out(start_gateway, clean_origin, direct):
    # A block keeps one piece: reading its footers one by one, each would replace the one before,
    # and the tail's. Those whose granule touches the tail's are read with it.
    data = orc_file("zlib")  # stripes some 150 KiB apart: some 7 footers to a 1 MiB block
    gateway, origin, key = orc_lake(start_gateway, direct, data, block=1024 * KiB)
    reads = loaded_footers(gateway, origin, key, len(data))
    assert reads < 3 < orc.ORCFile(io.BytesIO(data)).nstripes
    before = len(origin.sent)
    through = GatewayFile(gateway, key, len(data))
    assert orc.ORCFile(through).nrows > 0 and through.caches == ["hit-mem"]  # the tail's piece is still there
    assert origin.sent[before:] == []


def test_orc_footers_in_blocks_no_larger_than_a_granule_are_all_loaded(tables, direct):
    gateway, origin = tables  # 64 KiB blocks: kept whole, never as pieces
    data, key = orc_file("zlib"), "lake/orders/part-0.orc"
    direct.put_object(Bucket="lake", Key=key, Body=data)
    stripes = orc.ORCFile(io.BytesIO(data)).nstripes
    before_tail = [start for start, _ in footer_ranges(data[-TAIL:], len(data)).ranges if start < len(data) - TAIL]
    assert stripes - 3 <= len(before_tail) < stripes  # the last stripes' footers are in the tail
    result = cli(gateway, "s3://lake/lake/orders/", "--footers")
    assert result.exit_code == 0, result.output
    assert f"(footers), {len(before_tail)} ranges read before the tails" in result.output
    asked = [ranged for method, sent_key, ranged in origin.sent if method == "GET" and sent_key == key]
    assert len(asked) == 1 + len(before_tail) and origin.ranged_bytes(key, len(data)) <= (stripes + 2) * BLOCK
    assert set(stripes_read_through(gateway, origin, key, len(data))) == {"hit-mem"}


@pytest.mark.parametrize("ranges, kept", [
    ([(100, 200), (5 * MiB, 5 * MiB + 10)], [(100, 200), (5 * MiB, 5 * MiB + 10)]),  # a block each
    ([(100, 200), (200 * KiB, 200 * KiB + 10)], []),  # two pieces of block 0: neither
    ([(100, 200), (70 * KiB, 70 * KiB + 10)], []),  # granules that touch: reading both is the block's start
    ([(9 * MiB + 10, 9 * MiB + 20)], []),  # in the tail's block, apart from the tail's piece
    ([(9 * MiB + 400 * KiB, 9 * MiB + 401 * KiB)], [(9 * MiB + 400 * KiB, 9 * MiB + 401 * KiB)]),  # touches it
    ([(9 * MiB + 300 * KiB, 9 * MiB + 301 * KiB), (9 * MiB + 400 * KiB, 9 * MiB + 401 * KiB)], []),
    ([(MiB - 10, MiB + 10)], [(MiB - 10, MiB + 10)]),  # over a block's end: alone in both
    ([(MiB - 10, MiB + 10), (MiB + 500 * KiB, MiB + 501 * KiB)], []),
])
def test_kept_apart_reads_one_run_a_block(ranges, kept):
    size = 9 * MiB + 512 * KiB  # the tail read from 64 KiB before the end: its piece from 9 MiB + 448 KiB
    assert kept_apart(ranges, size - TAIL, size, MiB, BLOCK) == kept


def test_what_is_not_a_table_and_bad_arguments(tables):
    gateway, _ = tables
    nothing = cli(gateway, "s3://lake/nowhere", "--table", "iceberg")
    assert nothing.exit_code == 1 and "stopped: InvalidRequest: no Iceberg metadata file under lake/nowhere/metadata/" \
        in nothing.output
    assert "not a Delta table" in cli(gateway, f"s3://lake/{ICEBERG}", "--table", "delta").output
    assert cli(gateway, "s3://lake/x", "--snapshot", "3").exit_code != 0
    bad = cli(gateway, "s3://lake/x", "--partitions", "dt~3")
    assert bad.exit_code == 1 and "partition filter 'dt~3'" in bad.output
    odd = avro({"type": "record", "name": "odd", "fields": [{"name": "status", "type": "int"}]}, [{"status": 1}])
    client(gateway.endpoint).put_object(Bucket="lake", Key=f"{ICEBERG}/metadata/m2.avro", Body=odd)
    broken = cli(gateway, f"s3://lake/{ICEBERG}", "--table", "iceberg")
    assert broken.exit_code == 1 and "is not a table this gateway can read as iceberg (KeyError: 'data_file')" \
        in broken.output
    url = f"{gateway.endpoint}/_gateway/load"
    auth = {"authorization": f"Bearer {TOKEN}"}
    for params in ({"bucket": "lake", "table": "hudi"}, {"bucket": "lake", "snapshot": "1"},
                   {"bucket": "lake", "table": "delta", "snapshot": "x"}, {"bucket": "lake", "unknown": "1"}):
        answer = httpx.post(url, params=params, headers=auth, timeout=10)
        assert answer.status_code == 400 and answer.json()["error"], params


def test_a_file_the_origin_refuses_is_named_as_failed_and_the_rest_is_loaded(tables, direct):
    gateway, origin = tables
    log = f"{DELTA}/_delta_log/"
    direct.put_object(Bucket="lake", Key=log + f"{4:020d}.json", Body=delta_commit(
        delta_add("s3://no-such-bucket/elsewhere/part-9.parquet", 10, "2026-12-09"),
        delta_add("day=2026-12-09/gone.parquet", 10, "2026-12-09")))
    result = cli(gateway, f"s3://lake/{DELTA}", "--table", "delta")
    assert result.exit_code == 1, result.output
    assert "loaded 3 of 5 files of the delta table lake/lake/events" in result.output
    assert "  no-such-bucket/elsewhere/part-9.parquet: NoSuchBucket" in result.output
    assert f"  {DELTA}/day=2026-12-09/gone.parquet: NoSuchKey" in result.output
    assert origin.keys(f"{DELTA}/day=") == {f"{DELTA}/day=2026-12-0{n}/part-{n}.parquet" for n in (1, 3, 4)} | {
        f"{DELTA}/day=2026-12-09/gone.parquet"}
