"""Fleet.route remembers the routes it worked out, for the members they were worked out for:
whatever joins, departures and hot-object replica counts come between, a route is the one
working it out anew gives (no read is sent to a node that left, or misses one that joined)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.cluster.fleet import Fleet
from gateway.cluster.membership import Member, Membership
from gateway.cluster.peers import PeerClient
from gateway.cluster.redis_handle import RedisHandle
from gateway.config import ClusterSettings, RedisSettings

NODES = [Member(name, f"http://{name}:8080") for name in ("a", "b", "c", "d", "e")]
OTHERS = NODES[1:]

steps = st.lists(st.one_of(
    st.tuples(st.just("members"), st.sets(st.sampled_from(OTHERS))),
    st.tuples(st.just("hot"), st.sampled_from(["x", "y"]), st.integers(1, 4)),
    st.tuples(st.just("route"), st.sampled_from(["x", "y", "z"]), st.integers(0, 3)),
), max_size=40)


@settings(max_examples=200, deadline=None)
@given(steps=steps, passive=st.booleans())
def test_a_remembered_route_is_the_one_worked_out_anew(steps, passive):  # type: ignore[no-untyped-def]
    redis = RedisHandle(RedisSettings(url="redis://127.0.0.1:1"))  # never connected: views are set by hand
    membership = Membership(redis, NODES[0], interval=1.0, ttl=3.0)
    fleet = Fleet(ClusterSettings(secret="s", passive_cache=passive), membership, PeerClient(ClusterSettings(secret="s")))
    for step in steps:
        if step[0] == "members":
            membership._update(step[1])
        elif step[0] == "hot":
            fleet.hot[("bkt", step[1])] = step[2]
        else:
            key, index = step[1], step[2]
            n = fleet.replicas("bkt", key)
            assert fleet.route("bkt", key, index) == fleet._work_out("bkt", key, index, n)
            assert all(member in membership.members for member in fleet.route("bkt", key, index).ask)
