"""HeatCounter: bounded, decaying, and it keeps the objects that are read most."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.heat import HeatCounter, HeatSender
from tests.store.helpers import Clock


def test_top_is_hottest_first():
    heat = HeatCounter()
    for key, times in (("a", 3), ("b", 5), ("c", 1)):
        for _ in range(times):
            heat.hit("bkt", key)
    assert heat.top(2) == [("bkt", "b", 5), ("bkt", "a", 3)]


def test_counts_halve_every_half_life_and_cold_objects_leave():
    clock = Clock()
    heat = HeatCounter(half_life=60, clock=clock)
    for _ in range(8):
        heat.hit("bkt", "hot")
    heat.hit("bkt", "once")
    clock.now += 61
    heat.hit("bkt", "new")
    assert heat.top() == [("bkt", "hot", 4), ("bkt", "new", 1)]


@given(st.lists(st.integers(min_value=0, max_value=200), max_size=2000))
def test_size_stays_bounded_and_a_dominant_object_stays(keys):
    heat = HeatCounter(capacity=40)
    for key in keys:
        heat.hit("bkt", str(key))
        heat.hit("bkt", "dominant")
        heat.hit("bkt", "dominant")
        assert len(heat) <= 40
    if keys:
        assert heat.top(1)[0][1] == "dominant"


def test_heat_cools_without_reads_once_per_half_life_that_passed():
    clock = Clock()
    heat = HeatCounter(half_life=10, clock=clock)
    for _ in range(40):
        heat.hit("bkt", "k")
    clock.now += 35  # three half-lives: 40 -> 20 -> 10 -> 5
    assert heat.top() == [("bkt", "k", 5)]
    clock.now += 30  # three more: 5 -> 2 -> 1 -> 0, and the object is gone
    assert heat.top() == []


def test_a_sender_keeps_its_hits_until_taken_and_the_first_worker_adds_them():
    sender, node = HeatSender(), HeatCounter()
    for key in ("a", "b", "a"):
        sender.hit("bkt", key)
    node.hit("bkt", "b")
    assert sender.top() == []  # the node's heat is the first worker's
    node.add_all((bucket, key, count) for (bucket, key), count in sender.take().items())
    assert sender.take() == {}
    assert sorted(node.top()) == [("bkt", "a", 2), ("bkt", "b", 2)]


def test_what_a_sender_holds_between_two_takes_is_bounded():
    sender = HeatSender(capacity=4)
    for key in range(10):
        sender.hit("bkt", str(key))
    sender.hit("bkt", "0")
    assert sender.take() == {("bkt", "0"): 2, ("bkt", "1"): 1, ("bkt", "2"): 1, ("bkt", "3"): 1}
