"""Synthetic traces for tests, validation and the docs: Zipf-popular objects."""

from __future__ import annotations

import bisect
import itertools
import random

from gateway.advisor.trace import Read


def zipf_reads(
    requests: int, objects: int, *, alpha: float = 0.9, object_size: int | tuple[int, int] = 1024**2,
    ranged: float = 0.0, range_size: int = 256 * 1024, seed: int = 1, bucket: str = "synth",
) -> list[Read]:
    """`requests` GETs over `objects` keys, key i drawn with probability ~ 1/(i+1)**alpha.

    `object_size`: one size for all, or (low, high) for sizes drawn log-uniformly per object.
    `ranged`: the share of GETs that read `range_size` bytes at a random offset instead of
    the whole object.
    """
    rng = random.Random(seed)
    weights = [1 / (i + 1) ** alpha for i in range(objects)]
    cumulative = list(itertools.accumulate(weights))
    total = cumulative[-1]
    if isinstance(object_size, tuple):
        low, high = object_size
        sizes = [int(low * (high / low) ** rng.random()) for _ in range(objects)]
    else:
        sizes = [object_size] * objects
    order = list(range(objects))
    rng.shuffle(order)  # popularity is not key order
    reads = []
    for _ in range(requests):
        obj = order[min(bisect.bisect(cumulative, rng.random() * total), objects - 1)]
        size = sizes[obj]
        if ranged and rng.random() < ranged and size > range_size:
            start = rng.randrange(0, size - range_size)
            reads.append(Read(bucket, f"obj-{obj:07d}", 0, start, start + range_size - 1, size))
        else:
            reads.append(Read(bucket, f"obj-{obj:07d}", 0, 0, size - 1, size))
    return reads


def write_csv(reads: list[Read], path: str) -> None:
    """The reads as a CSV trace (time,key,offset,length,size), one GET per second."""
    with open(path, "w", encoding="utf-8") as out:
        out.write("time,key,offset,length,size\n")
        for t, read in enumerate(reads):
            out.write(f"{t},{read.bucket}/{read.key},{read.start},{read.end - read.start + 1},{read.size}\n")


def write_access_log(reads: list[Read], path: str) -> None:
    """The reads as gateway access log lines, without a size field (as the gateway logs today):
    whole reads carry no range, ranged reads `bytes=a-b` and 206."""
    import orjson

    with open(path, "w", encoding="utf-8") as out:
        for n, read in enumerate(reads):
            whole = read.start == 0 and read.end == read.size - 1
            out.write(orjson.dumps({
                "request_id": f"{n:016X}", "user": "synthetic", "operation": "GetObject", "method": "GET",
                "bucket": read.bucket, "key": read.key, "range": None if whole else f"bytes={read.start}-{read.end}",
                "status": 200 if whole else 206, "bytes": read.end - read.start + 1, "cache": None, "latency_ms": 0,
            }).decode() + "\n")


def main(argv: list[str] | None = None) -> None:
    """python -m gateway.advisor.synth: write a synthetic Zipf trace as an access log or CSV."""
    import argparse

    from gateway.config import parse_size

    parser = argparse.ArgumentParser(prog="python -m gateway.advisor.synth", description=main.__doc__)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--objects", type=int, default=20_000)
    parser.add_argument("--alpha", type=float, default=0.9)
    parser.add_argument("--min-size", default="64KiB")
    parser.add_argument("--max-size", default="16MiB")
    parser.add_argument("--ranged", type=float, default=0.3, help="share of GETs that read a range")
    parser.add_argument("--range-size", default="256KiB")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--format", choices=("log", "csv"), default="log")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    low, high = parse_size(args.min_size), parse_size(args.max_size)
    reads = zipf_reads(args.requests, args.objects, alpha=args.alpha,
                       object_size=(low, high) if high > low else low, ranged=args.ranged,
                       range_size=parse_size(args.range_size), seed=args.seed)
    (write_csv if args.format == "csv" else write_access_log)(reads, args.out)


if __name__ == "__main__":
    main()
