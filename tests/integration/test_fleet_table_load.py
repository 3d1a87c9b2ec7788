"""`gateway load --table` in a fleet: the node asked reads the table's log and hands out its files;
each block of them is fetched by its owners, once from the origin; `--footers` has only the tails'
blocks fetched, each by its owner."""

from __future__ import annotations

from click.testing import CliRunner

from gateway.cli import main
from gateway.cluster.placement import owners, placement_name
from tests.integration import test_fleet
from tests.integration.test_fleet import BLOCK, TOKEN, _blocks, node_id, origin_requests
from tests.support import client
from tests.waiting import wait_for
from tests.tables.writers import delta_add, delta_commit, delta_remove, parquet_file

make_fleet = test_fleet.make_fleet  # the fleet fixture, shared

FILES = {f"events/day=2026-12-0{n}/part-{n}.parquet": parquet_file(12_000 * n, n) for n in (1, 2, 3)}
LIVE = [key for key in FILES if "day=2026-12-02" not in key]  # part-2 is removed by the second commit


def put_table(direct) -> None:  # type: ignore[no-untyped-def]
    for key, body in FILES.items():  # behind the fleet: nothing of them is cached
        direct.put_object(Bucket="bkt", Key=key, Body=body)
    adds = [delta_add(key.removeprefix("events/"), len(body), key.split("=")[1][:10]) for key, body in FILES.items()]
    direct.put_object(Bucket="bkt", Key=f"events/_delta_log/{0:020d}.json", Body=delta_commit(*adds))
    direct.put_object(Bucket="bkt", Key=f"events/_delta_log/{1:020d}.json",
                      Body=delta_commit(delta_remove("day=2026-12-02/part-2.parquet")))


def load(endpoint: str, *args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(main, ["load", "s3://bkt/events", "--table", "delta", "--url", endpoint,
                                     "--token", TOKEN, *args], env={"GATEWAY_ADMIN_TOKEN": None})  # type: ignore[dict-item]


def blocks_of(key: str) -> range:
    return range(-(-len(FILES[key]) // BLOCK))


def test_a_table_load_has_each_block_of_its_files_fetched_by_its_owner_once(make_fleet, direct):
    fleet = make_fleet(hot_replication=False)
    put_table(direct)
    before = origin_requests(*fleet.nodes)
    result = load(fleet.nodes[2].endpoint)
    assert result.exit_code == 0, result.output
    assert f"loaded {len(LIVE)} of {len(LIVE)} files of the delta table bkt/events" in result.output
    blocks = sum(len(blocks_of(key)) for key in LIVE)
    # One listing of the log and its two commits, then each block of the live files once.
    assert origin_requests(*fleet.nodes)["GET"] - before["GET"] == blocks + 3
    ids = [node_id(n) for n in fleet.nodes]
    held: dict[tuple[str, int], set[str]] = {}
    for node in fleet.nodes:
        for block in _blocks(node):
            if block.key in FILES:
                held.setdefault((block.key, block.index), set()).add(node_id(node))
    assert held == {(key, i): set(owners(placement_name("bkt", key, i), ids, 1)) for key in LIVE
                    for i in blocks_of(key)}


def test_footers_in_a_fleet_fetch_only_the_tails_blocks(make_fleet, direct):
    fleet = make_fleet(hot_replication=False)
    put_table(direct)
    before = origin_requests(*fleet.nodes)
    result = load(fleet.nodes[0].endpoint, "--footers")
    assert result.exit_code == 0, result.output
    assert "(footers)" in result.output
    tails = {key: {i for i in blocks_of(key) if (i + 1) * BLOCK > len(FILES[key]) - 64 * 1024} for key in LIVE}
    wanted = {(key, i) for key, indexes in tails.items() for i in indexes}

    def held() -> set[tuple[str, int]]:
        return {(block.key, block.index) for node in fleet.nodes for block in _blocks(node) if block.key in FILES}

    # The node asked read the tails from the origin and offers each block to its owner (engine.lending),
    # which takes it over the peer API: soon every tail block is held, and nothing else of the files.
    wait_for(lambda: held() == wanted, "every tail block held by an owner", within=20)
    assert origin_requests(*fleet.nodes)["GET"] - before["GET"] <= 3 + 2 * len(LIVE)  # the log; a tail a file
    for key in LIVE:  # what an engine reads first is now a hit on any node
        got = client(fleet.nodes[1].endpoint).get_object(Bucket="bkt", Key=key, Range="bytes=-8")
        assert got["Body"].read() == FILES[key][-8:]
        assert got["ResponseMetadata"]["HTTPHeaders"]["x-cache"] in ("hit-mem", "hit-peer")
