"""The origin's listing pages as `parse_list_objects` reads them, held to the parser it replaced
(defusedxml's pure-Python ElementTree, every child scanned by its local name: `oracle` below) on
generated pages: namespaces or none, text escaped, in CDATA or as character references, comments,
processing instructions and unknown elements between the fields, repeated fields, keys of any
character, URL-encoded or not, other declared encodings, DTDs (refused by both)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar
from urllib.parse import quote_plus, unquote_plus

import defusedxml.ElementTree as SafeET
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import S3Error
from gateway.s3api import xml
from gateway.s3api.xml import ListPage, ObjectEntry, Owner, RestoreStatus, listing
from gateway.s3api.xml.common import (
    _ESCAPES,
    _PARSE_ERRORS,
    S3_NS,
    _bool,
    _child,
    _children,
    _el,
    _flag,
    _int,
    _local,
    _render_owner,
    _text,
    url_encode,
)

# --- the parser before: the oracle ------------------------------------------------------------------


def oracle(body: bytes) -> ListPage:
    """parse_list_objects as it was before the C parser and `find` (gateway e46ed93)."""
    try:
        root = SafeET.fromstring(body, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    except _PARSE_ERRORS:
        raise S3Error("InternalError") from None
    if _local(root.tag) != "ListBucketResult":
        raise S3Error("InternalError")
    v2 = _text(root, "KeyCount") is not None
    encoding = _text(root, "EncodingType")
    decode: Callable[[str], str] = unquote_plus if encoding == "url" else str

    def decoded(name: str) -> str | None:
        value = _text(root, name)
        return None if value is None else decode(value)

    contents = []
    for item in _children(root, "Contents"):
        restore, owner = _child(item, "RestoreStatus"), _child(item, "Owner")
        contents.append(ObjectEntry(
            key=decode(_text(item, "Key") or ""), last_modified=_text(item, "LastModified") or "",
            etag=_text(item, "ETag") or "", size=_int(_text(item, "Size")) or 0,
            storage_class=_text(item, "StorageClass") or "STANDARD",
            owner=None if owner is None else Owner(id=_text(owner, "ID"), display_name=_text(owner, "DisplayName")),
            checksum_algorithm=tuple(c.text or "" for c in _children(item, "ChecksumAlgorithm")),
            checksum_type=_text(item, "ChecksumType"),
            restore_status=None if restore is None else RestoreStatus(
                is_restore_in_progress=bool(_flag(_text(restore, "IsRestoreInProgress"))),
                restore_expiry_date=_text(restore, "RestoreExpiryDate")),
        ))
    return ListPage(
        contents=contents, common_prefixes=[decode(_text(cp, "Prefix") or "") for cp in _children(root, "CommonPrefixes")],
        is_truncated=bool(_flag(_text(root, "IsTruncated"))), next_marker=decoded("NextMarker"),
        next_continuation_token=_text(root, "NextContinuationToken"), name=_text(root, "Name"),
        prefix=decoded("Prefix") if v2 else _text(root, "Prefix"), delimiter=decoded("Delimiter"),
        marker=decoded("Marker"), start_after=decoded("StartAfter"), continuation_token=_text(root, "ContinuationToken"),
        max_keys=_int(_text(root, "MaxKeys")), key_count=_int(_text(root, "KeyCount")), encoding_type=encoding)


def both(body: bytes) -> tuple[ListPage | str, ListPage | str]:
    """What each parser makes of `body`: the page, or the code of the S3 error it raised."""
    results: list[ListPage | str] = []
    for parse in (xml.parse_list_objects, oracle):
        try:
            results.append(parse(body))
        except S3Error as err:
            results.append(err.code)
    return results[0], results[1]


T = TypeVar("T")

# --- generated pages --------------------------------------------------------------------------------

# Characters XML 1.0 allows in text (\r is read as \n unless written as a reference).
XML_CHAR = st.characters(blacklist_categories=("Cs",), blacklist_characters="\ufffe\uffff").filter(
    lambda c: c in "\t\n\r" or ord(c) >= 0x20)
ANY_TEXT = st.text(XML_CHAR, max_size=12)


@st.composite
def character_data(draw: st.DrawFn, value: str) -> str:
    """`value` as XML character data, piece by piece escaped, as references or in CDATA."""
    out, at = [], 0
    while at < len(value):
        piece = value[at:at + draw(st.integers(1, len(value) - at))]
        at += len(piece)
        how = draw(st.sampled_from(("escaped", "references", "hex references", "cdata")))
        if how == "cdata" and "]]>" not in piece and "\r" not in piece:
            out.append(f"<![CDATA[{piece}]]>")
        elif how == "references":
            out.append("".join(f"&#{ord(c)};" for c in piece))
        elif how == "hex references":
            out.append("".join(f"&#x{ord(c):X};" for c in piece))
        else:
            out.append(piece.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\r", "&#13;"))
    return "".join(out)


def one_in(n: int, rare: st.SearchStrategy[T], usual: st.SearchStrategy[T]) -> st.SearchStrategy[T]:
    """`rare` one time in about `n` (st.integers(0, n - 1) == 0 would be far more often: Hypothesis
    draws the ends of a range more than their share)."""
    return st.sampled_from([False] * (n - 1) + [True]).flatmap(lambda pick: rare if pick else usual)


NOISE = st.sampled_from(("", "", "", "\n  ", "<!-- a <Key>comment</Key> -->", "<?pi data?>",
                         "<Unknown><Key>not this</Key><Size>x</Size></Unknown>", "<Contents2/>"))


@st.composite
def element(draw: st.DrawFn, qualify: Callable[[str], str], name: str, value: str | list[str]) -> str:
    """`<name>value</name>` (or, for a list, its child elements), with noise before it."""
    tag = qualify(name)
    inner = draw(character_data(value)) if isinstance(value, str) else "".join(value)
    if inner == "" and draw(st.booleans()):
        return draw(NOISE) + f"<{tag}/>"
    return draw(NOISE) + f"<{tag}>{inner}</{tag}>"


@st.composite
def fields(draw: st.DrawFn, qualify: Callable[[str], str], values: dict[str, st.SearchStrategy[str | list[str]]]) -> str:
    """Some of `values`' elements, in any order, one sometimes repeated (the first is the one read)."""
    names = draw(st.lists(st.sampled_from(sorted(values)), unique=True))
    if names and draw(one_in(5, st.just(True), st.just(False))):
        names.insert(draw(st.integers(0, len(names))), draw(st.sampled_from(names)))
    return "".join(draw(element(qualify, name, draw(values[name]))) for name in names)


@st.composite
def listing_body(draw: st.DrawFn) -> bytes:
    url = draw(st.booleans())
    key = ANY_TEXT.map(url_encode) if url else ANY_TEXT
    number = one_in(20, st.sampled_from(("", "x", "1.5")), st.one_of(
        st.integers(0, 2**40).map(str), st.integers(0, 9).map(lambda n: f" {n}\n")))
    flag = st.sampled_from(("true", "false", "True", " true ", "", "yes"))
    mode = draw(st.sampled_from(("s3", "none", "prefixed", "other")))
    prefix = "s3:" if mode == "prefixed" else ""

    def qualify(name: str) -> str:
        return prefix + name

    def nested(values: dict[str, st.SearchStrategy[str | list[str]]]) -> st.SearchStrategy[str | list[str]]:
        return fields(qualify, values).map(lambda inner: [inner])

    owner = nested({"ID": ANY_TEXT, "DisplayName": ANY_TEXT})
    restore = nested({"IsRestoreInProgress": flag, "RestoreExpiryDate": ANY_TEXT})
    contents = nested({"Key": key, "LastModified": ANY_TEXT, "ETag": ANY_TEXT, "Size": number,
                       "StorageClass": st.sampled_from(("STANDARD", "GLACIER", "")), "Owner": owner,
                       "ChecksumAlgorithm": st.sampled_from(("CRC32", "CRC64NVME", "")),
                       "ChecksumType": st.sampled_from(("FULL_OBJECT", "COMPOSITE")), "RestoreStatus": restore})
    common = nested({"Prefix": key})
    top = {name: key for name in ("Name", "Prefix", "Delimiter", "Marker", "NextMarker", "StartAfter")}
    top.update(ContinuationToken=ANY_TEXT, NextContinuationToken=ANY_TEXT, MaxKeys=number, KeyCount=number,
               IsTruncated=flag)
    head = draw(fields(qualify, top))
    if url:
        head = draw(element(qualify, "EncodingType", "url")) + head
    items = [draw(element(qualify, "Contents", draw(contents))) for _ in range(draw(st.integers(0, 4)))]
    items += [draw(element(qualify, "CommonPrefixes", draw(common))) for _ in range(draw(st.integers(0, 3)))]
    namespace = {"s3": f' xmlns="{S3_NS}"', "none": "", "prefixed": f' xmlns:s3="{S3_NS}"',
                 "other": ' xmlns="urn:example:other"'}[mode]
    text = f"<{prefix}ListBucketResult{namespace}>{head}{''.join(items)}{draw(NOISE)}</{prefix}ListBucketResult>"
    declaration = draw(st.sampled_from(('<?xml version="1.0" encoding="UTF-8"?>\n', "", '<?xml version="1.0"?>',
                                        "\ufeff", '<?xml version="1.0" encoding="UTF-16"?>',
                                        '<?xml version="1.0" encoding="ISO-8859-1"?>')))
    if "UTF-16" in declaration:
        return (declaration + text).encode("utf-16")
    if "ISO-8859-1" in declaration:
        return (declaration + text).encode("latin-1", errors="xmlcharrefreplace")
    if draw(one_in(10, st.just(True), st.just(False))):  # a DTD, with or without an entity in use: refused by both
        text = '<!DOCTYPE ListBucketResult [<!ENTITY e "entity">]>' + text.replace("<Name>", "<Name>&e;", 1)
    return (declaration + text).encode("utf-8", errors="surrogatepass")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(listing_body())
def test_the_parser_reads_every_page_as_the_one_before(body: bytes) -> None:
    new, old = both(body)
    assert new == old


@given(st.lists(ANY_TEXT, max_size=5), st.lists(ANY_TEXT, max_size=3))
def test_url_encoded_keys_come_back_as_they_were(keys: list[str], prefixes: list[str]) -> None:
    body = ("<ListBucketResult xmlns=\"" + S3_NS + "\"><KeyCount>1</KeyCount><EncodingType>url</EncodingType>"
            + "".join(f"<Contents><Key>{url_encode(k)}</Key><Size>1</Size></Contents>" for k in keys)
            + "".join(f"<CommonPrefixes><Prefix>{url_encode(p)}</Prefix></CommonPrefixes>" for p in prefixes)
            + "</ListBucketResult>").encode()
    page = xml.parse_list_objects(body)
    assert [entry.key for entry in page.contents] == keys and page.common_prefixes == prefixes


@pytest.mark.parametrize("body", [
    b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>'
    b"<ListBucketResult><Name>&b;</Name></ListBucketResult>",
    b'<!DOCTYPE l [<!ENTITY x SYSTEM "file:///etc/passwd">]><ListBucketResult><Name>&x;</Name></ListBucketResult>',
    # A DOCTYPE in an encoding whose bytes do not spell `<!DOCTYPE`: UTF-16, with and without a BOM.
    '<!DOCTYPE l [<!ENTITY a "b">]><ListBucketResult><Name>&a;</Name></ListBucketResult>'.encode("utf-16"),
    '<!DOCTYPE l [<!ENTITY a "b">]><ListBucketResult><Name>&a;</Name></ListBucketResult>'.encode("utf-16-le"),
    '<!DOCTYPE l [<!ENTITY a "b">]><ListBucketResult><Name>&a;</Name></ListBucketResult>'.encode("utf-16-be"),
    b"<ListBucketResult><Name>&undefined;</Name></ListBucketResult>",
    b"<ListBucketResult><Size>1</Size>", b"<Other/>", b"",
])
def test_a_page_with_a_dtd_or_broken_is_the_origins_failure(body: bytes) -> None:
    with pytest.raises(S3Error) as info:
        xml.parse_list_objects(body)
    assert (info.value.code, info.value.status) == ("InternalError", 500)


def test_a_page_of_odd_characters() -> None:
    body = (b'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="' + S3_NS.encode() + b'">'
            b"<Name>b</Name><Prefix></Prefix><KeyCount>2</KeyCount><IsTruncated>false</IsTruncated>"
            b"<Contents><Key>a&#13;b<![CDATA[<&>]]>\xed\x95\x9c&amp;</Key><Size>3</Size>"
            b"<ChecksumAlgorithm>CRC32</ChecksumAlgorithm><ChecksumAlgorithm>SHA1</ChecksumAlgorithm></Contents>"
            b"<CommonPrefixes><Prefix>p\r\n/</Prefix></CommonPrefixes></ListBucketResult>")
    page = xml.parse_list_objects(body)
    assert page.contents == [ObjectEntry(key="a\rb<&>한&", last_modified="", etag="", size=3,
                                         checksum_algorithm=("CRC32", "SHA1"))]
    assert page.common_prefixes == ["p\n/"] and page.key_count == 2 and page.prefix == "" and page.name == "b"


# --- what the answer to the client is written with ----------------------------------------------------

ANY_CHARACTERS = st.text(st.one_of(st.characters(), st.sampled_from("&<>\"'~*/+% \t\r\n\x1b\ufffe\uffff\ud800é한😀")),
                         max_size=30)


@given(ANY_CHARACTERS)
def test_xml_escape_is_the_table(text: str) -> None:
    assert xml.xml_escape(text) == text.translate(_ESCAPES)


@given(ANY_CHARACTERS)
def test_url_encode_is_quote_plus(text: str) -> None:
    """(As url_encode was before it quoted only the runs that need it.)"""
    assert xml.url_encode(text) == quote_plus(text, safe="/*", encoding="utf-8", errors="surrogatepass").replace(
        "~", "%7E")


@given(st.lists(st.one_of(st.characters(exclude_categories=["Cs"]), st.sampled_from("%+ 0aFg"),
                          st.integers(0, 255).map(lambda b: f"%{b:02X}"), st.integers(0, 255).map(lambda b: f"%{b:02x}")),
                max_size=20).map("".join))
def test_url_decode_is_unquote_plus(text: str) -> None:
    assert listing._url_decode(text) == unquote_plus(text)


def old_render_contents(page: ListPage, encode: Callable[[str], str], *, with_owner: bool) -> Iterator[str]:
    """listing._render_contents before it wrote an entry in one string (gateway e46ed93)."""
    for item in page.contents:
        yield "<Contents>" + _el("Key", encode(item.key)) + _el("LastModified", item.last_modified) + _el("ETag", item.etag)
        for algorithm in item.checksum_algorithm:
            yield _el("ChecksumAlgorithm", algorithm)
        if item.checksum_type is not None:
            yield _el("ChecksumType", item.checksum_type)
        yield _el("Size", str(item.size))
        if with_owner and item.owner is not None:
            yield _render_owner(item.owner)
        yield _el("StorageClass", item.storage_class)
        if item.restore_status is not None:
            status = item.restore_status
            yield "<RestoreStatus>" + _el("IsRestoreInProgress", _bool(status.is_restore_in_progress))
            if status.restore_expiry_date is not None:
                yield _el("RestoreExpiryDate", status.restore_expiry_date)
            yield "</RestoreStatus>"
        yield "</Contents>"
    for prefix in page.common_prefixes:
        yield "<CommonPrefixes>" + _el("Prefix", encode(prefix)) + "</CommonPrefixes>"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(listing_body(), st.booleans(), st.booleans())
def test_the_answer_is_written_as_before(body: bytes, url: bool, with_owner: bool) -> None:
    try:
        page = xml.parse_list_objects(body)
    except S3Error:
        return
    encode = url_encode if url else str
    assert "".join(listing._render_contents(page, encode, with_owner=with_owner)) == \
        "".join(old_render_contents(page, encode, with_owner=with_owner))
