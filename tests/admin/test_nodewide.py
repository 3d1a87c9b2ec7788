"""A node of several workers answers for its members as its workers route: a member is the
node's only once every worker that answered sees it (each worker has its own heartbeats)."""

from __future__ import annotations

from typing import Any

from gateway.admin.nodewide import node_metrics, node_stats


def own(worker: int, members: list[str]) -> dict[str, Any]:
    """A worker's own stats document with nothing in it but its view of the fleet."""
    return {"worker": worker, "node": "a:1", "uptime_seconds": 1.0, "requests": 0, "hits": 0, "misses": 0,
            "served_bytes": {"memory": 0, "disk": 0, "origin": 0, "peer": 0}, "tiers": [], "hot_objects": [],
            "members": members, "pinned": [], "shadow": None, "replication": None}


def test_a_member_one_worker_has_not_seen_yet_is_not_the_nodes():
    documents = [own(0, ["a:1", "b:2", "c:3"]), own(1, ["a:1", "c:3"])]
    assert node_stats(documents, 2)["members"] == ["a:1", "c:3"]
    assert node_stats(list(reversed(documents)), 2)["members"] == ["a:1", "c:3"]


def test_workers_that_agree_give_their_members():
    documents = [own(1, ["a:1", "b:2"]), own(0, ["a:1", "b:2"])]
    assert node_stats(documents, 2)["members"] == ["a:1", "b:2"]
    assert node_stats(documents[:1], 2)["members"] == ["a:1", "b:2"]  # worker 0 did not answer


def test_the_nodes_fleet_members_gauge_is_its_largest_workers_view():
    """A member stays in gateway_fleet_members while any worker may still route to it (the stats'
    members are those every worker sees: what the node can count on)."""
    def worker(members: int) -> list[Any]:
        return [["gateway_fleet_members", "", "gauge", [["gateway_fleet_members", {}, float(members)]]]]

    text = node_metrics([worker(2), worker(3)], None, 2).decode()
    assert "gateway_fleet_members 3.0" in text
    text = node_metrics([worker(2), worker(2)], None, 2).decode()
    assert "gateway_fleet_members 2.0" in text
