"""A fleet node killed with SIGKILL under load (issue 7): clients of the survivors see no
error and never a wrong byte; once the dead node's membership runs out (cluster.member_ttl)
the survivors stop asking it; started again, it rejoins and serves.

Three `gateway serve` subprocesses on the test Redis and the session's moto; the load and
its report are bench/fleet_faults.py's (which runs the same scenario longer)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gateway.cli import main
from tests.support import client

ROOT = Path(__file__).resolve().parent.parent.parent


def bench():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_fleet_faults", ROOT / "bench" / "fleet_faults.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_fleet_faults"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def fleet(origin_endpoint, clean_redis):  # type: ignore[no-untyped-def]
    ff = bench()
    nodes = ff.start_fleet(origin_endpoint, clean_redis.url)
    yield ff, nodes
    for node in nodes:
        node.stop()


def test_a_node_killed_under_load_costs_its_own_clients_only(fleet, origin_endpoint, capsys):
    ff, nodes = fleet
    objects = ff.put_objects(origin_endpoint, 12)
    ff.warm(nodes, objects)
    killed, survivors = nodes[1], [nodes[0], nodes[2]]
    load = ff.Load([n.endpoint for n in nodes], objects, readers=2).start()
    scrape = ff.Scrape(nodes, load).start()
    try:
        ff.wait_for(lambda: sum(o.error is None for o in load.outcomes) >= 150, 30, "load under way")
        kill_at = load.now()
        killed.kill()
        # Within member_ttl (1.5 s) and a heartbeat (0.5 s) the survivors drop it from their view ...
        # (gateway_fleet_members is the largest view of a node's workers: each worker keeps its own)
        ff.wait_for(lambda: all(ff.metric(n, "gateway_fleet_members") == 2 for n in survivors), 15,
                    "every worker of the survivors forgets the dead node")
        forgotten_at = load.now()
        # ... and stop asking it: their peer failures no longer grow while the load goes on
        # (a request sent just before the view changed may still fail: wait until each of
        # their readers was answered a request it sent after).
        ff.wait_for(lambda: {(o.node, o.reader) for o in load.outcomes if o.began > forgotten_at}
                    >= {(n, r) for n in (0, 2) for r in range(load.readers)}, 30, "a request of each reader since")
        failures = [ff.metric(n, "gateway_peer_failures_total") for n in survivors]
        answered = sum(o.error is None for o in load.outcomes)
        ff.wait_for(lambda: sum(o.error is None for o in load.outcomes) >= answered + 40, 30, "more load")
        assert [ff.metric(n, "gateway_peer_failures_total") for n in survivors] == failures
        restart_at = load.now()
        killed.start()
        ff.wait_for(lambda: all(len(ff.members(n)) == 3 for n in nodes), 30, "the node rejoins")
        rejoined_at = load.now()
        ff.wait_for(lambda: sum(o.node == 1 and o.error is None and o.at > rejoined_at for o in load.outcomes) >= 20,
                    30, "the restarted node serves its readers")
    finally:
        scrape.stop()
        load.stop()
    outcomes = load.outcomes
    figures = ff.report(outcomes, scrape.samples, killed=1, kill_at=kill_at, restart_at=restart_at,
                        end=load.now(), window=1.0)
    print(f"forgotten {forgotten_at - kill_at:.1f} s after the kill; rejoined {rejoined_at - restart_at:.1f} s "
          f"after the restart")
    with capsys.disabled():
        print("\n" + capsys.readouterr().out)
    assert figures["wrong"] == 0, "wrong bytes were served"
    assert figures["survivors_failed"] == 0, figures["errors"]
    assert all(o.error is None for o in outcomes if o.node == 1 and o.at < kill_at)
    assert any(o.error is not None for o in outcomes if o.node == 1 and kill_at <= o.at < restart_at)


def test_a_load_started_as_a_node_dies_loads_everything_once_the_fleet_noticed(fleet, origin_endpoint):
    """`gateway load` through a survivor right after a node was killed: its blocks' spreads find the
    dead owner (ServiceUnavailable) and are asked again until the fleet forgot it (member_ttl and a
    heartbeat), then go to the new owners; every object loaded, none failed, and read right."""
    ff, nodes = fleet
    objects = ff.put_objects(origin_endpoint, 12)
    nodes[1].kill()
    result = CliRunner().invoke(main, ["load", f"s3://{ff.BUCKET}/", "--url", nodes[0].endpoint, "--token", ff.TOKEN],
                                env={"GATEWAY_ADMIN_TOKEN": None})  # type: ignore[dict-item]
    assert result.exit_code == 0, result.output
    assert f"loaded {len(objects)} of {len(objects)} objects" in result.output
    # (Not asserted: that every block is then held. Likely: a survivor whose workers' views still held the
    # dead node when the retried spread reached it skips blocks it did not own in that view, and a
    # later read fetches those: 8 of about 50 GETs in one CI run.)
    for node in (nodes[0], nodes[2]):
        for key, body in objects.items():
            assert client(node.endpoint).get_object(Bucket=ff.BUCKET, Key=key)["Body"].read() == body
