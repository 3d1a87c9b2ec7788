"""Instructions per request authentication, counted by valgrind: a measure of the signature
check's own cost that other load on a shared machine does not move.

On this 2-core machine, timings of a 100 us function move by tens of percent with whatever
else runs (in-process timings of `authenticate` gave 69 to 108 us for the same code in one
minute). Valgrind's lackey counts the instructions the process executes instead: this script
runs `gateway.s3api.auth.authenticate` on 0 and on N requests in fresh processes under it, for
each code tree given, and prints the difference per request.

The requests are what an SDK sends for a GetObject: SigV4 in the Authorization header, as
botocore signs it, each with its own amz-sdk-invocation-id (so its own signature), checked with
the memo of verified signatures the gateway runs with (auth.memo). `--presigned`: presigned
GETs instead, each its own URL. `--same`: one request sent again and again (a dashboard's presigned
URL, fetched anew on every refresh: answered by the memo from its third time; a header-signed one
is signed anew by its SDK each time, so it is the same as without), each with its own copies of its
strings, as each read from the wire is. The work tree is counted twice when its compiled SigV4 check
(gateway/s3api/auth/_sigv4check.c, built by `pip install -e .`) is there: with it, and with its
pure-Python twin (auth.sigv4check) in its place.

    .venv/bin/python bench/auth_instructions.py --baseline HEAD~1          # the work tree against it
    .venv/bin/python bench/auth_instructions.py --baseline 5fed3b3 --presigned
    .venv/bin/python bench/auth_instructions.py --baseline 5fed3b3 --presigned --same

Needs: apt-get install -y valgrind. About 20 s of valgrind per process, 4 processes per tree pair.
"""

from __future__ import annotations

import argparse
import pickle
import re
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import fleet as fl  # noqa: E402

KEY = ("AKIAADMIN0000000001", "admin-secret-0000000000000000000000000001")
ENDPOINT = "http://127.0.0.1:8080"
USER_AGENT = ("Boto3/1.35.0 md/Botocore#1.35.0 ua/2.0 os/linux#6.18 md/arch#x86_64 lang/python#3.11.7 "
              "md/pyimpl#CPython cfg/retry-mode#legacy Botocore/1.35.0")

# Run under valgrind in a fresh process: `python - CODE_ROOT REQUESTS_PICKLE COUNT [twin]`; "twin": the
# compiled check made unimportable, so that auth.fastpath takes its pure-Python twin.
_CHILD = """
import pickle, sys
from datetime import datetime, timedelta, timezone
sys.path.insert(0, sys.argv[1])
if sys.argv[4:] == ["twin"]:
    sys.modules["gateway.s3api.auth._sigv4check"] = None
from gateway.s3api.auth import RequestView, VerifiedSignatures, authenticate
views, when, key = pickle.load(open(sys.argv[2], "rb"))
views = [RequestView(*v) for v in views]
memo = VerifiedSignatures()
secret_for = {key[0]: key[1]}.get
skew = timedelta(minutes=15)  # made once, as s3api.identify holds it
authenticate(views[-1], secret_for, now=when, max_skew=skew, verified=memo)
for view in views[:int(sys.argv[3])]:
    authenticate(view, secret_for, now=when, max_skew=skew, verified=memo)
"""


def _anew(text: str) -> str:
    """A copy of `text` (a str of its own, its hash not known yet)."""
    return text.encode().decode()


def requests(count: int, presigned: bool,
             same: bool = False) -> list[tuple[str, str, str, tuple[tuple[str, str], ...]]]:
    """(method, raw path, query string, headers) of `count` GETs, each signed on its own (`same`:
    the first of them `count` times, its strings copied anew each time)."""
    if same:
        (method, path, query, wire), = requests(1, presigned)
        return [(method, _anew(path), _anew(query), tuple((_anew(n), _anew(v)) for n, v in wire))
                for _ in range(count)]
    made = []
    for number in range(count):
        headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity", "amz-sdk-request": "attempt=1"}
        if presigned:
            request = AWSRequest(method="GET", url=f"{ENDPOINT}/bench/object?x-id=GetObject&n={number}")
            S3SigV4QueryAuth(Credentials(*KEY), "s3", "us-east-1", expires=3600).add_auth(request)
        else:
            headers["amz-sdk-invocation-id"] = f"{number:08x}-0000-4000-8000-000000000000"
            request = AWSRequest(method="GET", url=f"{ENDPOINT}/bench/object", headers=headers)
            S3SigV4Auth(Credentials(*KEY), "s3", "us-east-1").add_auth(request)
        path, _, query = request.url.removeprefix(ENDPOINT).partition("?")
        wire = tuple((name.lower(), value) for name, value in request.headers.items())
        made.append(("GET", path, query, (*wire, ("host", ENDPOINT.removeprefix("http://")))))
    return made


def instructions(code: Path, views: Path, count: int, twin: bool) -> int:
    run = subprocess.run(["valgrind", "--tool=lackey", "--basic-counts=yes", sys.executable, "-", str(code),
                          str(views), str(count), *(["twin"] if twin else [])],
                         input=_CHILD, capture_output=True, text=True, check=True)
    found = re.search(r"guest instrs:\s+([\d,]+)", run.stderr)
    if found is None:
        raise SystemExit(f"no instruction count from valgrind: {run.stderr[-500:]}")
    return int(found.group(1).replace(",", ""))


def compiled(code: Path) -> bool:
    """Whether the tree's compiled SigV4 check is built (and so what auth.fastpath uses)."""
    probe = f"import sys; sys.path.insert(0, {str(code)!r}); import gateway.s3api.auth._sigv4check"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", help="a git revision to compare the work tree with")
    parser.add_argument("--count", type=int, default=400, help="requests authenticated per process")
    parser.add_argument("--presigned", action="store_true", help="presigned GETs instead of header-signed ones")
    parser.add_argument("--same", action="store_true", help="one request sent again and again")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gateway-auth-instructions-") as tmp:
        views = Path(tmp) / "requests.pickle"
        with views.open("wb") as out:
            pickle.dump((requests(args.count + 1, args.presigned, args.same), datetime.now(timezone.utc), KEY), out)
        trees = {"work tree": (ROOT, False)}
        if compiled(ROOT):
            trees = {"work tree, pure-Python twin": (ROOT, True), "work tree, compiled": (ROOT, False)}
        if args.baseline:
            described = fl.snapshot(args.baseline, Path(tmp) / "baseline")
            trees = {described: (Path(tmp) / "baseline", False), **trees}
        kind = "presigned" if args.presigned else "header-signed (SDK)"
        print(f"bench/auth_instructions.py {' '.join(argv if argv is not None else sys.argv[1:])}")
        sent = "one of them sent again and again" if args.same else "each signed on its own"
        print(f"{args.count} {kind} GETs, {sent}, authenticated with the memo on")
        for name, (code, twin) in trees.items():
            per_request = (instructions(code, views, args.count, twin) - instructions(code, views, 0, twin)) / args.count
            print(f"  {name}: {per_request:,.0f} instructions per authentication")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
