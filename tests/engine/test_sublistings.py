"""A listing page read out of a page of a folder above it (engine.sublistings) reads, through the
listing parse the S3 API answers with, as the page of its prefix: exactly the entries under the
prefix, in order, with every field; and a page it cannot read that way is not narrowed."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway.engine.sublistings import narrowable, narrowed, parents
from gateway.s3api.xml import ListPage, ObjectEntry, parse_list_objects, render_list_objects_v1, render_list_objects_v2

# Keys of folders and odd characters: what URL encoding and XML escaping must carry (&, <, +, %, space,
# '=' of Hive partitions, non-ASCII).
_PART = st.text(alphabet=st.sampled_from(list("ab=1/ &<+%é日\n")), min_size=0, max_size=6)


def _page(keys: list[str], *, v2: bool, prefix: str, truncated: bool = False) -> bytes:
    entries = [ObjectEntry(key=key, last_modified="2026-12-07T01:00:00.000Z", etag=f'"{index:032x}"', size=index)
               for index, key in enumerate(keys)]
    page = ListPage(contents=entries, is_truncated=truncated, next_continuation_token="t" if truncated else None)
    if v2:
        return render_list_objects_v2(page, bucket="bkt", prefix=prefix, delimiter=None, max_keys=1000,
                                      continuation_token=None, start_after=None, fetch_owner=False,
                                      encoding_type="url")
    return render_list_objects_v1(page, bucket="bkt", prefix=prefix, delimiter=None, max_keys=1000, marker=None,
                                  encoding_type="url")


@settings(max_examples=300, deadline=None)
@given(parent=_PART, below=_PART, rests=st.lists(_PART, max_size=8), v2=st.booleans())
@example(parent="t/", below="a=1/", rests=["a=1/x", "a=2/y", "a=10/z"], v2=True)
@example(parent="", below="&<+%", rests=["&<+%", "&<+", "&<+% x"], v2=False)
def test_a_page_read_out_of_a_folder_above_is_the_page_of_its_prefix(parent, below, rests, v2):
    keys = sorted({parent + rest for rest in rests}, key=lambda key: key.encode())
    prefix = parent + below
    body = narrowed(_page(keys, v2=v2, prefix=parent), prefix)
    assert body is not None
    page, whole = parse_list_objects(body), parse_list_objects(_page(keys, v2=v2, prefix=parent))
    assert page.contents == [entry for entry in whole.contents if entry.key.startswith(prefix)]
    assert (page.is_truncated, page.common_prefixes) == (False, [])
    assert page.prefix == prefix
    if v2:
        assert page.key_count == len(page.contents)


def test_a_truncated_page_or_one_with_common_prefixes_is_not_narrowed():
    assert narrowed(_page(["t/a", "t/b"], v2=True, prefix="t/", truncated=True), "t/a") is None
    delimited = render_list_objects_v2(ListPage(common_prefixes=["t/a/"]), bucket="bkt", prefix="t/", delimiter="/",
                                       max_keys=1000, continuation_token=None, start_after=None, fetch_owner=False,
                                       encoding_type="url")
    assert narrowed(delimited, "t/a/") is None
    namespaced = _page(["t/a"], v2=True, prefix="t/").replace(b"<Contents>", b"<s3:Contents>")
    assert narrowed(namespaced, "t/a") is None


def test_which_pages_are_read_out_of_a_folder_above():
    assert parents("t/a=1/b") == ["t/a=1/", "t/", ""]
    assert parents("t/") == ["", ] and parents("") == []
    assert narrowable((("encoding-type", "url"), ("list-type", "2"), ("max-keys", "1000")))
    for other in (("delimiter", "/"), ("continuation-token", "x"), ("start-after", "a"), ("marker", "a")):
        assert not narrowable((("encoding-type", "url"), other))
    assert not narrowable((("list-type", "2"), ("max-keys", "1000")))  # keys not URL-encoded: asked of the origin
