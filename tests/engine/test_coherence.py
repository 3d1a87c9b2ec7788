"""Coherence: invalidation epochs, trust in the invalidation channel, and the node's journal."""

from __future__ import annotations

from pathlib import Path

from gateway.engine.coherence import Coherence
from gateway.node.journal import Journal


class Channel:
    """What Coherence asks of the invalidation channel (gateway.cluster.invalidation.Invalidations):
    whether this node hears every invalidation now."""

    def __init__(self) -> None:
        self.heard = True

    def listening(self) -> bool:
        return self.heard


def test_an_invalidation_changes_its_buckets_epoch_only():
    coherence = Coherence(None)
    before = {bucket: coherence.epoch(bucket) for bucket in ("a", "b")}
    coherence.invalidated("a")
    once = coherence.epoch("a")
    assert once != before["a"] and coherence.epoch("b") == before["b"]
    coherence.invalidated("a")
    assert coherence.epoch("a") not in (before["a"], once)


def test_a_purge_changes_every_epoch():
    coherence = Coherence(None)
    before = {bucket: coherence.epoch(bucket) for bucket in ("a", "b")}
    coherence.purged()
    assert all(coherence.epoch(bucket) != epoch for bucket, epoch in before.items())


def test_without_a_channel_cached_answers_are_trusted():
    assert Coherence(None).trusted()


def test_cached_answers_are_trusted_only_while_the_channel_is_heard():
    channel = Channel()
    coherence = Coherence(channel)  # type: ignore[arg-type]
    assert coherence.trusted()
    channel.heard = False  # Redis down or hung, or the listener behind
    assert not coherence.trusted()
    channel.heard = True
    assert coherence.trusted()


def test_what_another_worker_forgot_is_forgotten_here_before_an_epoch_is_answered(tmp_path: Path):
    path = str(tmp_path / "journal")
    with Journal(path, slots=8) as other, Journal(path, slots=8) as mine:
        applied: list[tuple[str, str | None]] = []
        purges: list[None] = []
        coherence = Coherence(None, mine)
        coherence.follow(lambda bucket, key: applied.append((bucket, key)), lambda: purges.append(None))
        assert coherence.epoch("b") == (0, 0) and applied == []
        other.append("b", "k")
        other.append("c")
        coherence.epoch("b")  # catches up first
        assert applied == [("b", "k"), ("c", None)]
        other.append_purge()
        coherence.catch_up()
        assert purges == [None] and applied == [("b", "k"), ("c", None)]
        coherence.catch_up()  # nothing new: nothing applied again
        assert purges == [None] and len(applied) == 2


def test_a_node_of_one_worker_has_no_journal_to_catch_up_with():
    def refuse(*args: object) -> None:
        raise AssertionError("nothing to apply")

    coherence = Coherence(None)
    coherence.follow(refuse, refuse)
    coherence.catch_up()
    assert coherence.epoch("b") == (0, 0)
