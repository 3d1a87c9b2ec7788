"""s3api.request's bucket-name rule: 1 to 255 ASCII letters, digits, '.', '_' or '-' (what
existing buckets may be named; CreateBucket applies S3's strict rules on top)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.s3api.request import _plausible_bucket

ALLOWED = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


@given(st.text(alphabet=st.sampled_from(sorted(ALLOWED) + ["é", "\x00", "/", " ", "\n", "٣", "ｂ"]), max_size=260)
       | st.text(max_size=40))
def test_the_bucket_rule_is_the_allowed_characters_and_length(name: str) -> None:
    assert _plausible_bucket(name) == (0 < len(name) <= 255 and set(name) <= ALLOWED)


def test_edges() -> None:
    assert _plausible_bucket("a" * 255) and not _plausible_bucket("a" * 256) and not _plausible_bucket("")
    assert not _plausible_bucket("bkt\n") and not _plausible_bucket("b\u0661")  # $ and \d are not the rule
