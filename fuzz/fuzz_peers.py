"""Fuzz target `peers`: what the peer API reads from another node's request
(gateway/cluster/peers.py decode_query, verify; encode_query and sign are their other halves).

Text: line 1 the x-gateway-peer header, line 2 the query string, line 3 the path (latin-1,
as peer_api decodes the wire). Contract: verify() answers 200, 401 or 403 and never raises;
decode_query never raises; a query made by encode_query (keys that are not UTF-8 included)
decodes to the same parameters; a request signed by sign() verifies.
"""

from __future__ import annotations

import sys

import atheris
from _harness import Controls, Finding, check, main, seed

with atheris.instrument_imports(include=["gateway.cluster.peers"]):
    from gateway.cluster.peers import decode_query, encode_query, sign, verify

SECRET = b"cluster-secret"
NOW = 1_714_564_800
NAMES = ("bucket", "key", "etag", "vid", "size", "index", "replicas")


def test_one_input(data: bytes) -> None:
    ctl = Controls(data)
    skew = ctl.pick(255) * 4 - 510  # -510..510 s
    raw = ctl.rest()
    lines = raw.decode("latin-1").split("\n")
    header, query, path = (lines + ["", "", ""])[:3]
    path = path or "/_peer/v1/block"
    try:
        status = verify(SECRET, header, "GET", path, query, now=NOW)
        decode_query(query)
    except Exception as exc:
        raise Finding(f"{type(exc).__name__} on a peer request: {exc!r}") from exc
    check(status in (200, 401, 403), f"verify answered {status}")

    # The other half: the asking node's encoding, with values from the input read as UTF-8.
    values = raw.decode("utf-8", "surrogateescape").split("\n")
    params = list(zip(NAMES, values))
    encoded = encode_query(params)
    check(decode_query(encoded) == dict(params), lambda: f"{params!r} -> {encoded!r} -> {decode_query(encoded)!r}")
    signed = sign(SECRET, "GET", path, encoded, when=NOW + skew)
    expected = 200 if abs(skew) <= 300 else 403
    check(verify(SECRET, signed, "GET", path, encoded, now=NOW) == expected, f"a signed request, skew {skew}")


def seeds() -> dict[str, bytes]:
    query = encode_query([("bucket", "lake"), ("key", "dir/ü a+b.txt"), ("etag", '"abc"'), ("vid", ""),
                          ("size", "1048576"), ("index", "3")])
    header = sign(SECRET, "GET", "/_peer/v1/block", query, when=NOW)
    return {
        "block": seed(f"{header}\n{query}\n/_peer/v1/block".encode("latin-1"), 127),
        "hold": seed(f"v1 {NOW} {'0' * 64}\nbucket=b&key=k&etag=e&vid=&size=10&replicas=2\n/_peer/v1/hold", 200),
        "values": seed("lake\ndir/\xff\xfe key\n\"e\"\n\n10\n0".encode("latin-1"), 127),
    }


if __name__ == "__main__":
    main("peers", test_one_input, seeds)
    sys.exit(0)
