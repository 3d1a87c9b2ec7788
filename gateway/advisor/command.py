"""`gateway advise`: replay a trace through memory:SSD splits of a budget and recommend one."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from fractions import Fraction

import click

from gateway.advisor import model as m
from gateway.advisor.simulate import BlockNames
from gateway.advisor.trace import Trace, TraceError, open_trace
from gateway.config import CacheSettings, ConfigError, Settings, load, parse_duration, parse_size
from gateway.node.cores import worker_count


def _size(text: str, name: str) -> int:
    try:
        return parse_size(text, name)
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from None


def _shares(text: str) -> list[float]:
    try:
        shares = [float(Fraction(part.strip())) for part in text.split(",") if part.strip()]
    except (ValueError, ZeroDivisionError):
        raise click.BadParameter(f"memory shares are fractions like 0,1/16,1/4,1, got {text!r}") from None
    if not shares or any(not 0 <= s <= 1 for s in shares):
        raise click.BadParameter(f"memory shares are between 0 and 1, got {text!r}")
    return shares


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n}"


@click.command()
@click.option("--log", "log_path", required=True, metavar="ACCESS_LOG",
              help="The gateway's JSON access log (gateway.access lines), or a CSV trace with --csv; '-' is stdin.")
@click.option("--csv", "csv_format", is_flag=True, help="The trace is CSV: time,key,offset,length[,size].")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="Take block size, policy, promotion and readahead from this gateway config.")
@click.option("--budget", default="64GiB", show_default=True, help="Bytes of memory + SSD to split.")
@click.option("--hdd", default="0", show_default=True, help="An HDD tier of this size below the SSD (0: none).")
@click.option("--memory-shares", default="0,1/64,1/32,1/16,1/8,1/4,1/2,1", show_default=True,
              help="Shares of the budget given to memory, the rest to SSD.")
@click.option("--policies", default="lru,s3fifo", show_default=True, help="Eviction policies to compare.")
@click.option("--prices", default="",
              help="$ per GiB-month of mem, ssd, hdd; $ per 1000 origin GETs (get) and per GB from the origin (gb); "
                   "$ per month of the node besides its cache (node). [default: mem=3,ssd=0.1,hdd=0.03,get=0,gb=0,node=0]")
@click.option("--latency", default="",
              help="Per-access latency of mem, ssd, hdd, origin. [default: mem=0.05ms,ssd=0.1ms,hdd=8ms,origin=20ms]")
@click.option("--bandwidth", default="",
              help="Bandwidth of mem, ssd, hdd, origin. [default: mem=10GB/s,ssd=2GB/s,hdd=150MB/s,origin=80MB/s]")
@click.option("--block-size", default=None, help="Block size (cache.block_size).  [default: 1MiB or --config's]")
@click.option("--readahead", type=click.IntRange(min=0), default=None,
              help="Blocks read ahead for sequential readers (cache.readahead_blocks).  [default: 16 or --config's]")
@click.option("--no-promote", is_flag=True, help="CACHE instead of CACHE_PROMOTE: lower-tier hits stay where they are.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Model a node of this many workers (server.workers): each keeps the blocks it owns in its "
                   "share of every quota. [default: the workers --config's node runs here, else 1]")
@click.option("--sample-rate", type=click.FloatRange(min=0, min_open=True, max=1), default=1.0, show_default=True,
              help="SHARDS sampling: replay only this share of the objects (by hash), into quotas scaled alike.")
@click.option("--period", default=None, help="How long the trace covers (e.g. 1h), for origin costs per month "
                                             "[default: from the lines' times, if any].")
@click.option("--chart", type=click.Path(dir_okay=False), help="Write a PNG chart here (needs matplotlib).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
def advise(
    log_path: str, csv_format: bool, config_path: str | None, budget: str, hdd: str, memory_shares: str,
    policies: str, prices: str, latency: str, bandwidth: str, block_size: str | None, readahead: int | None,
    no_promote: bool, workers: int | None, sample_rate: float, period: str | None, chart: str | None, as_json: bool,
) -> None:
    """Recommend a memory:SSD split of a cache budget (and a policy) from a recorded trace.

    Replays the trace through the tiered store's model (the live store's block names and
    eviction policies) for every memory share and policy, and prints hit ratios, origin
    requests and bytes saved, an estimated mean GET latency, the monthly cost and a
    cost-performance figure. See docs/advisor.md.
    """
    base_model, settings = _model(config_path, prices, latency, bandwidth)
    cache = settings.cache if settings else None
    # As `gateway serve` resolves server.workers (0: the cores this machine lets it use).
    node = workers if workers is not None else worker_count(settings.server) if settings else 1
    plan = _plan(cache, policies, block_size, readahead, no_promote, budget, hdd, memory_shares, sample_rate, node)
    if chart:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise click.ClickException("--chart needs matplotlib: pip install 's3-cache-gateway[advisor]'") from None
    try:
        trace = open_trace(log_path, csv_format=csv_format)
    except TraceError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        seconds = parse_duration(period, "--period") if period else trace.stats.period
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--period") from None
    model = m.Model(base_model.prices, base_model.latency, base_model.bandwidth, seconds)
    result = _simulate(trace, plan, model, with_curves=bool(chart))
    if chart:
        from gateway.advisor.chart import draw

        draw(chart, result.curves, result.outcomes, result.chosen,
             title=f"{log_path}: {len(trace.reads)} GETs, budget {human(plan.total)}")
    if as_json:
        click.echo(_as_json(trace, plan, model, seconds, result))
        return
    _print_report(trace, plan, result)
    if chart:
        click.echo(f"chart: {chart}")


@dataclass(frozen=True, slots=True)
class _Plan:
    """What to replay: the options checked, the config's cache settings filled in."""

    policies: list[str]
    block_size: int
    readahead: int
    promote: bool
    total: int
    hdd: int
    shares: list[float]
    sample_rate: float
    workers: int  # the node's: each keeps its blocks in 1/workers of every quota


@dataclass(frozen=True, slots=True)
class _Result:
    outcomes: list[m.Outcome]
    chosen: m.Outcome
    best: m.Outcome
    curves: dict[str, list[tuple[int, float, float]]]
    elapsed: float
    replays: int


def _model(config_path: str | None, prices: str, latency: str, bandwidth: str) -> tuple[m.Model, Settings | None]:
    """The cost and speed model from the options, and the settings of --config if given."""
    try:
        settings = load(config_path) if config_path else None
        model = m.Model(
            prices={**m.DEFAULT_PRICES, **m.parse_pairs(prices, m.DEFAULT_PRICES, float, "--prices")},
            latency={**m.DEFAULT_LATENCY, **m.parse_pairs(latency, m.DEFAULT_LATENCY, m.parse_latency, "--latency")},
            bandwidth={**m.DEFAULT_BANDWIDTH,
                       **m.parse_pairs(bandwidth, m.DEFAULT_BANDWIDTH, m.parse_bandwidth, "--bandwidth")},
        )
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    return model, settings


def _plan(
    cache: CacheSettings | None, policies: str, block_size: str | None, readahead: int | None, no_promote: bool,
    budget: str, hdd: str, memory_shares: str, sample_rate: float, workers: int,
) -> _Plan:
    names = [p.strip().lower() for p in policies.split(",") if p.strip()]
    unknown = [p for p in names if p not in ("lru", "s3fifo")]
    if not names or unknown:
        raise click.BadParameter(f"policies are lru and s3fifo, got {policies!r}", param_hint="--policies")
    size_of_block = _size(block_size, "--block-size") if block_size else (cache.block_size if cache else 1024**2)
    if size_of_block <= 0:
        raise click.BadParameter("must be positive", param_hint="--block-size")
    ahead = readahead if readahead is not None else (cache.readahead_blocks if cache else 16)
    promote = not no_promote and (cache.promote if cache else True)
    total = _size(budget, "--budget")
    hdd_bytes = _size(hdd, "--hdd")
    shares = _shares(memory_shares)
    if total <= 0:
        raise click.BadParameter("must be more than 0 bytes", param_hint="--budget")
    return _Plan(names, size_of_block, ahead, promote, total, hdd_bytes, shares, sample_rate, workers)


def _simulate(trace: Trace, plan: _Plan, model: m.Model, *, with_curves: bool) -> _Result:
    """Every split and policy replayed, the recommended and the fastest picked; miss-ratio curves for a chart."""
    began = time.perf_counter()
    outcomes = m.sweep(trace.reads, plan.total, policies=plan.policies, fractions=plan.shares, hdd=plan.hdd,
                       block_size=plan.block_size, promote=plan.promote, readahead=plan.readahead,
                       rate=plan.sample_rate, model=model, workers=plan.workers)
    chosen = m.recommend(outcomes)
    best = m.fastest(outcomes)
    curves = {}
    if with_curves:
        sizes = [max(plan.block_size, int(plan.total * 2.0**k)) for k in range(-8, 2)]
        block_names = BlockNames()
        curves = {p: m.miss_ratio_curve(trace.reads, sizes, p, block_size=plan.block_size, readahead=plan.readahead,
                                        rate=plan.sample_rate, names=block_names, workers=plan.workers)
                  for p in plan.policies}
    elapsed = time.perf_counter() - began
    replays = len(outcomes) + sum(len(curve) for curve in curves.values())
    return _Result(outcomes, chosen, best, curves, elapsed, replays)


def _as_json(trace: Trace, plan: _Plan, model: m.Model, seconds: float | None, result: _Result) -> str:
    stats = trace.stats
    return json.dumps({
        "trace": {"gets": stats.reads, "placed": len(trace.reads), "unplaced": stats.unplaced,
                  "writes": stats.writes, "skipped_lines": stats.skipped, "period_seconds": seconds,
                  "sized_by_field": stats.sized_by_field, "sized_by_trace": stats.sized_by_trace,
                  "sized_by_bound": stats.sized_by_bound},
        "settings": {"budget": plan.total, "hdd": plan.hdd, "block_size": plan.block_size, "readahead": plan.readahead,
                     "promote": plan.promote, "sample_rate": plan.sample_rate, "workers": plan.workers,
                     "prices": model.prices,
                     "latency": model.latency, "bandwidth": model.bandwidth},
        "outcomes": [o.as_dict() for o in result.outcomes],
        "recommended": result.chosen.as_dict(), "fastest": result.best.as_dict(),
        "curves": {p: [{"size": s, "byte_miss_ratio": b, "get_miss_ratio": g} for s, b, g in c]
                   for p, c in result.curves.items()},
        "simulation_seconds": round(result.elapsed, 3), "replays": result.replays,
    }, indent=2)


def _print_report(trace: Trace, plan: _Plan, result: _Result) -> None:
    stats, chosen, best, hdd_bytes = trace.stats, result.chosen, result.best, plan.hdd
    read_bytes = sum(r.end - r.start + 1 for r in trace.reads)
    click.echo(f"trace: {len(trace.reads)} GETs of {human(read_bytes)}"
               + (f" ({stats.unplaced} suffix reads of objects of unknown size left out)" if stats.unplaced else "")
               + f"; object sizes: {stats.sized_by_field} from the size field, {stats.sized_by_trace} from the trace, "
               f"{stats.sized_by_bound} lower bounds")
    click.echo(f"budget {human(plan.total)}" + (f" + HDD {human(hdd_bytes)}" if hdd_bytes else "")
               + f", blocks of {human(plan.block_size)}, readahead {plan.readahead}, "
               f"{'CACHE_PROMOTE' if plan.promote else 'CACHE'}"
               + (f", a node of {plan.workers} workers (each its blocks in 1/{plan.workers} of every quota)"
                  if plan.workers > 1 else "")
               + (f", sampled at {plan.sample_rate:g}" if plan.sample_rate < 1 else "")
               + f"; {result.replays} replays in {result.elapsed:.1f}s "
               f"({result.replays * stats.reads / result.elapsed:,.0f} GETs/s)")
    click.echo("")
    click.echo(f"{'policy':<7} {'memory':>9} {'ssd':>9} {'byte hit':>8} {'GET hit':>8} {'origin GETs saved':>17} "
               f"{'origin saved':>12} {'latency ms':>10} {'$/month':>9} {'GET/s per $':>11}")
    for o in result.outcomes:
        mark = " <- recommended" if o is chosen else (" <- fastest" if o is best else "")
        click.echo(f"{o.policy:<7} {human(o.memory):>9} {human(o.ssd):>9} {o.counters.byte_hit_ratio:>8.1%} "
                   f"{o.counters.object_hit_ratio:>8.1%} {o.origin_requests_saved:>17.0f} "
                   f"{human(o.origin_bytes_saved):>12} {o.mean_latency * 1000:>10.3f} {o.cost:>9.2f} "
                   f"{o.perf_per_dollar:>11.2f}{mark}")
    click.echo("")
    click.echo(f"recommended: cache.policy = \"{chosen.policy}\", cache.memory_quota = \"{human(chosen.memory)}\", "
               f"SSD quota {human(chosen.ssd)}" + (f", HDD quota {human(hdd_bytes)}" if hdd_bytes else "")
               + f": byte hit ratio {chosen.counters.byte_hit_ratio:.1%}, ~{chosen.mean_latency * 1000:.2f} ms per GET, "
               f"${chosen.cost:.2f}/month")
    if best is not chosen:
        click.echo(f"fastest: {best.policy} with {human(best.memory)} memory: ~{best.mean_latency * 1000:.2f} ms per GET "
                   f"for ${best.cost:.2f}/month")
