"""The admin API's answers for people: `gateway stats` as a short plain-text summary, and
the progress bar of `gateway load`."""

from __future__ import annotations

from typing import Any, TextIO

HOT_SHOWN = 10


def summary(stats: dict[str, Any]) -> str:
    lines = [
        f"node      {stats['node']}  (up {duration(stats['uptime_seconds'])})",
        *_workers(stats),
        f"requests  {stats['requests']}",
        f"hit ratio {stats['hit_ratio']:.1%}  ({stats['hits']} block hits, {stats['misses']} misses)",
        "served    " + "  ".join(f"{source} {size(count)}" for source, count in stats["served_bytes"].items()),
        "tiers" + ("" if stats["tiers"] else "     none (no block cache)"),
    ]
    for tier in stats["tiers"]:
        used, quota = tier["used_bytes"], tier["quota_bytes"]
        share = f"{used / quota:.0%}" if quota else "-"
        lines.append(f"  {tier['name']:<8} {tier['medium']:<6} {size(used):>10} / {size(quota):<10} {share:>4}"
                     f"  {tier['blocks']} blocks")
    lines.append("hot objects" + ("" if stats["hot_objects"] else "  none yet"))
    for hot in stats["hot_objects"][:HOT_SHOWN]:
        lines.append(f"  {hot['hits']:>8}  {hot['bucket']}/{hot['key']}")
    lines.append("members   " + ", ".join(stats["members"]))
    lines.append("pinned    " + (", ".join(f"{p['bucket']}/{p['prefix']}" for p in stats["pinned"]) or "none"))
    return "\n".join(lines)


def _workers(stats: dict[str, Any]) -> list[str]:
    """A node of several workers: how many the figures hold (none for a node of one process)."""
    workers = stats.get("workers")
    if workers is None:
        return []
    line = f"workers   {workers['answered']} of {workers['count']} answered"
    if workers["missing"]:
        missing = ", ".join(map(str, workers["missing"]))
        line += f"; worker {missing}: counts as last written, the other figures missing"
    return [line]


def size(count: float) -> str:
    """Bytes in binary units: 0 B, 512 B, 1.5 KiB, 2.0 GiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {secs:02d}s"


class ProgressBar:
    """One line redrawn in place on a terminal (nothing on a pipe or file): objects loaded
    of those found so far, and the bytes read."""

    WIDTH = 30

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.live = out.isatty()

    def show(self, progress: dict[str, Any]) -> None:
        if not self.live:
            return
        done = progress["loaded"] + len(progress["failed"])
        total = progress["objects"]
        filled = self.WIDTH * done // total if total else 0
        more = "" if progress["listed"] else "+"
        self.out.write(f"\r[{'#' * filled}{'.' * (self.WIDTH - filled)}] {done}/{total}{more} objects"
                       f"  {size(progress['bytes'])}  {len(progress['failed'])} failed ")
        self.out.flush()

    def close(self) -> None:
        if self.live:
            self.out.write("\n")
            self.out.flush()
