"""Instructions per listing page the gateway relays, counted by valgrind: the origin's
ListObjectsV2 page parsed (`parse_list_objects`) and S3's answer rendered for the client
(`render_list_objects_v2`), as `s3api.handlers.list_objects` does for every LIST, hit or miss.

Timings of a 50 us function move by tens of percent with other load on this 2-core machine;
valgrind's lackey counts the instructions the process executes instead. Each code tree runs in
fresh processes under it, on 0 and on N pages, and the difference per page is printed.

The pages are moto's answer to a ListObjectsV2 with encoding-type=url (what the gateway asks the
origin), of --keys keys named as bench/cold_requests.py names them (a date prefix, then the data
file's name; --keys 2 is that bench's page: the schema file and the data file), rendered for a
client that asked for encoding-type=url (as botocore asks) with delimiter '/'.

    .venv/bin/python bench/listing_instructions.py --baseline HEAD~1             # the work tree against it
    .venv/bin/python bench/listing_instructions.py --baseline 689a186 --keys 1000

Needs: apt-get install -y valgrind. A few seconds of valgrind per process, 4 processes per pair.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import fleet as fl  # noqa: E402

_NS = "http://s3.amazonaws.com/doc/2006-03-01/"

# Run under valgrind in a fresh process: `python - CODE_ROOT PAGE_FILE COUNT`.
_CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from gateway.s3api import xml
body = open(sys.argv[2], "rb").read()

def relay():
    page = xml.parse_list_objects(body)
    return xml.render_list_objects_v2(page, bucket="bench", prefix="small/orderdate=1992-01-01/", delimiter="/",
                                      max_keys=1000, continuation_token=None, start_after=None, fetch_owner=False,
                                      encoding_type="url")

relay()  # imports and first-call caches outside the count
for _ in range(int(sys.argv[3])):
    relay()
"""


def page(keys: int) -> bytes:
    """moto's ListObjectsV2 answer (encoding-type=url, delimiter '/') holding `keys` keys."""
    prefix = "small/orderdate%3D1992-01-01/"
    names = [prefix + ".schema"] + [prefix + f"part-{n:05d}.parquet" for n in range(keys - 1)]
    contents = "".join(
        f"<Contents><Key>{name}</Key><LastModified>2026-12-06T21:00:00.000Z</LastModified>"
        f"<ETag>&quot;9b2cf535f27731c974343645a3985328&quot;</ETag><Size>3500</Size>"
        f"<StorageClass>STANDARD</StorageClass></Contents>" for name in names[:keys])
    return (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="{_NS}"><Name>bench</Name>'
            f"<Prefix>{prefix}</Prefix><MaxKeys>1000</MaxKeys><Delimiter>/</Delimiter><EncodingType>url"
            f"</EncodingType><IsTruncated>false</IsTruncated>{contents}<KeyCount>{keys}</KeyCount>"
            f"</ListBucketResult>").encode()


def instructions(code: Path, body: Path, count: int) -> int:
    run = subprocess.run(["valgrind", "--tool=lackey", "--basic-counts=yes", sys.executable, "-", str(code),
                          str(body), str(count)], input=_CHILD, capture_output=True, text=True, check=True)
    found = re.search(r"guest instrs:\s+([\d,]+)", run.stderr)
    if found is None:
        raise SystemExit(f"no instruction count from valgrind: {run.stderr[-500:]}")
    return int(found.group(1).replace(",", ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", help="a git revision to compare the work tree with")
    parser.add_argument("--keys", type=int, default=2, help="keys in the page")
    parser.add_argument("--count", type=int, default=0, help="pages per process (default: 200,000 keys' worth)")
    args = parser.parse_args(argv)
    count = args.count or max(20, 200_000 // (args.keys * 100))
    with tempfile.TemporaryDirectory(prefix="gateway-listing-instructions-") as tmp:
        body = Path(tmp) / "page.xml"
        body.write_bytes(page(args.keys))
        trees = {"work tree": ROOT}
        if args.baseline:
            described = fl.snapshot(args.baseline, Path(tmp) / "baseline")
            trees = {described: Path(tmp) / "baseline", **trees}
        print(f"bench/listing_instructions.py {' '.join(argv if argv is not None else sys.argv[1:])}")
        print(f"a ListObjectsV2 page of {args.keys} keys ({len(page(args.keys)):,} bytes) parsed and rendered, "
              f"{count} times per process")
        for name, code in trees.items():
            per_page = (instructions(code, body, count) - instructions(code, body, 0)) / count
            print(f"  {name}: {per_page:,.0f} instructions per page")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
