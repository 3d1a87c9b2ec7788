"""replica_counts: hot objects get more owners, in proportion to their heat, within bounds."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from gateway.cluster.replication import replica_counts
from gateway.config import ClusterSettings

SETTINGS = ClusterSettings(hot_threshold=100.0, hot_objects=50)


def test_heat_in_proportion_to_the_threshold():
    heat = [(("b", "every"), 100.0), (("b", "half"), 50.0), (("b", "cold"), 10.0), (("b", "past"), 1000.0)]
    assert replica_counts(heat, 4, SETTINGS) == {("b", "every"): 4, ("b", "half"): 2, ("b", "past"): 4}


def test_max_replicas_and_the_base_count():
    settings = dataclasses.replace(SETTINGS, max_replicas=2, replicas=2)
    assert replica_counts([(("b", "k"), 1000.0)], 5, settings) == {}  # no more than the base: left out
    settings = dataclasses.replace(SETTINGS, max_replicas=3, replicas=2)
    assert replica_counts([(("b", "k"), 1000.0)], 5, settings) == {("b", "k"): 3}


@given(st.dictionaries(st.tuples(st.just("b"), st.text(max_size=3)), st.floats(0, 1e6), max_size=80),
       st.integers(1, 8), st.integers(0, 8), st.integers(1, 3))
def test_counts_stay_in_bounds_follow_heat_and_cover_only_the_hottest(heat, members, max_replicas, replicas):
    settings = dataclasses.replace(SETTINGS, max_replicas=max_replicas, replicas=replicas)
    counts = replica_counts(heat.items(), members, settings)
    ceiling = min(members, max_replicas or members)
    assert len(counts) <= settings.hot_objects
    assert all(replicas < n <= ceiling for n in counts.values())
    for a, n in counts.items():  # hotter never gets fewer
        for b, value in heat.items():
            if value >= heat[a]:
                assert counts.get(b, replicas) >= n or len(heat) > settings.hot_objects


def test_a_replica_is_kept_until_the_heat_falls_a_third_below_what_earned_it():
    earned = replica_counts([(("b", "k"), 100.0)], 4, SETTINGS)
    assert earned == {("b", "k"): 4}
    # Heat 70: would be 3 owners from scratch, keeps 4 (70 x 1.5 > 75, the step to 4).
    assert replica_counts([(("b", "k"), 70.0)], 4, SETTINGS, previous=earned) == {("b", "k"): 4}
    assert replica_counts([(("b", "k"), 70.0)], 4, SETTINGS) == {("b", "k"): 3}
    # Heat 40: 40 x 1.5 = 60 earns only 3, so down to 3 (from scratch: 2).
    assert replica_counts([(("b", "k"), 40.0)], 4, SETTINGS, previous=earned) == {("b", "k"): 3}
    # Rising never waits.
    assert replica_counts([(("b", "k"), 100.0)], 4, SETTINGS, previous={("b", "k"): 2}) == {("b", "k"): 4}
