"""gateway.lru against a reference model: a list of (key, value) pairs, the least recently used
first, that every operation updates in the plainest way."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.lru import LRU

KEYS = st.integers(min_value=0, max_value=4)
OPERATIONS = st.lists(st.one_of(
    st.tuples(st.just("put"), KEYS, st.integers()),
    st.tuples(st.just("get"), KEYS),
    st.tuples(st.just("use"), KEYS),
    st.tuples(st.just("touch"), KEYS),  # a key not held: KeyError
    st.tuples(st.just("pop"), KEYS),
    st.tuples(st.just("pop_oldest"),),
    st.tuples(st.just("remove_where"), KEYS),  # drops the keys below this one
    st.tuples(st.just("clear"),),
), max_size=60)


class Model:
    def __init__(self, size: int) -> None:
        self.size = size
        self.pairs: list[tuple[int, int]] = []  # least recently used first
        self.dropped: list[tuple[int, int]] = []  # what `put` dropped past the size, in order

    def _find(self, key: int) -> int | None:
        return next((i for i, (k, _) in enumerate(self.pairs) if k == key), None)

    def get(self, key: int) -> int | None:
        at = self._find(key)
        return None if at is None else self.pairs[at][1]

    def use(self, key: int) -> int | None:
        at = self._find(key)
        if at is None:
            return None
        self.pairs.append(self.pairs.pop(at))
        return self.pairs[-1][1]

    def touch(self, key: int) -> None:
        if self.use(key) is None:
            raise KeyError(key)

    def put(self, key: int, value: int) -> None:
        self.pop(key)
        if self.size <= 0:
            return
        self.pairs.append((key, value))
        self.dropped += self.pairs[:-self.size]
        self.pairs = self.pairs[-self.size:]

    def pop(self, key: int) -> int | None:
        at = self._find(key)
        return None if at is None else self.pairs.pop(at)[1]

    def pop_oldest(self) -> tuple[int, int] | None:
        return self.pairs.pop(0) if self.pairs else None

    def remove_where(self, below: int) -> int:
        before = len(self.pairs)
        self.pairs = [(k, v) for k, v in self.pairs if not k < below]
        return before - len(self.pairs)

    def clear(self) -> None:
        self.pairs = []


@settings(max_examples=400, deadline=None)
@given(st.integers(min_value=-1, max_value=5), OPERATIONS)
def test_the_lru_does_what_the_model_does(size: int, operations: list[tuple[object, ...]]) -> None:
    dropped: list[tuple[int, int]] = []
    lru: LRU[int, int] = LRU(size, dropped=lambda key, value: dropped.append((key, value)))
    model = Model(size)
    for name, *args in operations:
        if name == "remove_where":
            below = args[0]
            assert lru.remove_where(lambda key: key < below) == model.remove_where(below)  # type: ignore[operator]
        elif name == "touch":
            held = model.get(args[0]) is not None  # type: ignore[arg-type]
            try:
                lru.touch(args[0])
            except KeyError:
                assert not held
            else:
                assert held
                model.touch(args[0])  # type: ignore[arg-type]
        else:
            assert getattr(lru, str(name))(*args) == getattr(model, str(name))(*args)
        assert list(lru) == [key for key, _ in model.pairs]  # the same keys, in the same order
        assert dropped == model.dropped  # each entry put drops is handed over, once
        assert len(lru) == len(model.pairs) <= max(size, 0)
        assert all((key in lru) == (model.get(key) is not None) for key in range(5))


def test_the_oldest_made_goes_first_when_entries_are_only_read_with_get() -> None:
    """A cache whose order is the order entries were made in (the signature memo, the fleet's routes)."""
    lru: LRU[str, int] = LRU(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1  # read, not used
    lru.put("c", 3)
    assert list(lru) == ["b", "c"] and lru.get("a") is None


def test_a_used_entry_outlives_those_used_before_it() -> None:
    lru: LRU[str, int] = LRU(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.use("a") == 1
    lru.put("c", 3)
    assert list(lru) == ["a", "c"]
