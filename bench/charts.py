"""Charts of benchmark results: a PNG drawn from the JSON results files the bench scripts write.

A results file is one run of one benchmark (`--json PATH` of bench/cache_serving.py and
bench/engines.py, or written by hand from a run recorded in docs/benchmarks-notes.md):

    {"bench": "cache_serving.hits", "command": "...", "commit": "...", "date": "...",
     "machine": "...", "load": "...", "source": "...", "targets": {...}, "rows": [{...}, ...]}

`source` says where the figures come from (the script that measured them, or the notes they were
copied from). Each kind of benchmark has its chart as data (CHARTS): panels of ratios, one bar per
row and series, on a log scale around 1.0 (parity with what the row is measured against), with a
row's target marked where it has one. Given several files of one kind (runs), it draws their bars
side by side, each labelled with its commit and date, and names every run under the chart.

    python bench/charts.py docs/img/hits.png docs/img/data/hits-232f448.json [more runs ...]
    python -m bench.charts OUT.png RESULTS.json ...
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REQUIRED = ("bench", "command", "commit", "date", "rows")


@dataclass(frozen=True)
class Series:
    """A ratio of each row: row[over] / row[under], or row[over] itself when `under` is empty (a ratio
    as recorded). Its target is the row's field `target`, else the file's targets[target]; `lower`
    (or the row's own `lower`) when the target is a ceiling."""

    label: str
    over: str
    under: str = ""
    target: str = "target"
    lower: bool = False


@dataclass(frozen=True)
class Panel:
    title: str
    series: tuple[Series, ...]


@dataclass(frozen=True)
class Chart:
    title: str
    label: str  # the row field that names a row
    panels: tuple[Panel, ...]


CHARTS: dict[str, Chart] = {
    "cache_serving.hits": Chart(
        "Warm hits from memory: the gateway against nginx proxy_cache on tmpfs (one worker each)", "row", (
            Panel("req/s, gateway / nginx (above 1: faster than nginx)",
                  (Series("gateway / nginx", "gateway_rps", "nginx_rps"),)),
            Panel("CPU per request, gateway / nginx (below 1: cheaper than nginx)",
                  (Series("gateway / nginx", "gateway_cpu_us", "nginx_cpu_us", target="cpu_target", lower=True),)),
        )),
    "cache_serving": Chart(
        "Serving benchmark, whole runs: each ratio against its target", "row", (
            Panel("ratio (the row says of what); a tick marks the target", (Series("ratio", "ratio"),)),
        )),
    "engines": Chart(
        "Trino against the origin directly: time, and what the gateway's cold run asked of the origin", "workload", (
            Panel("time, direct / gateway (above 1: faster than direct)",
                  (Series("cold", "cold_ratio", target="cold_target"), Series("warm", "warm_ratio"))),
            Panel("origin, gateway cold / direct (below 1: less than direct)",
                  (Series("requests", "requests_ratio", target="requests_target", lower=True),
                   Series("bytes", "bytes_ratio", target="bytes_target", lower=True))),
        )),
}


# --- results files -----------------------------------------------------------------------------------


def results_document(bench: str, rows: Sequence[dict[str, Any]], *, command: str, commit: str,
                     machine: str, load: str, targets: dict[str, float] | None = None) -> dict[str, Any]:
    """One run's results as a results file holds them, dated now."""
    return {"bench": bench, "command": command, "commit": commit,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine, "load": load,
            "source": "written by the script that measured it", "targets": targets or {}, "rows": list(rows)}


def write_results(path: str | Path, document: dict[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"results: {path}")


def read_results(path: str | Path) -> dict[str, Any]:
    document = json.loads(Path(path).read_text())
    missing = [key for key in REQUIRED if key not in document]
    if missing:
        raise ValueError(f"{path}: not a results file (no {', '.join(missing)})")
    return document


# --- drawing -----------------------------------------------------------------------------------------


def value(row: dict[str, Any], series: Series) -> float:
    """The series' ratio for a row; NaN where the row lacks a figure."""
    over = row.get(series.over)
    under = row.get(series.under) if series.under else 1.0
    if not isinstance(over, int | float) or not isinstance(under, int | float) or not under or over <= 0:
        return math.nan
    return over / under


def target(row: dict[str, Any], document: dict[str, Any], series: Series) -> float | None:
    found = row.get(series.target, document.get("targets", {}).get(series.target))
    return float(found) if isinstance(found, int | float) else None


def met(row: dict[str, Any], series: Series, ratio: float, goal: float) -> bool:
    """Whether a ratio meets its target (a row may say so itself: `met`, where the recorded ratio is
    rounded onto its target)."""
    if isinstance(row.get("met"), bool):
        return bool(row["met"])
    return ratio <= goal if row.get("lower", series.lower) else ratio >= goal


def run_name(document: dict[str, Any]) -> str:
    """A run's short name: its `label`, else its commit and day."""
    return str(document.get("label") or f"{str(document['commit']).split()[0]} {str(document['date'])[:10]}")


def footnote(documents: Sequence[dict[str, Any]]) -> str:
    """Under the chart: each command and setup once, each run with its date and load, each source once
    (with the runs it is the source of, when there are several)."""
    lines = [f"command: {c}" for c in dict.fromkeys(d["command"] for d in documents)]
    lines += [f"setup: {m}" for m in dict.fromkeys(str(d["machine"]) for d in documents if d.get("machine"))]
    for d in documents:
        name = f"{run_name(d)}: {d['date']}" if len(documents) > 1 else f"run: {d['commit']}, {d['date']}"
        lines.append(name + (f"; load: {d['load']}" if d.get("load") else ""))
    sources: dict[str, list[str]] = {}
    for d in documents:
        sources.setdefault(str(d.get("source", "?")), []).append(run_name(d))
    for source, runs in sources.items():
        lines.append(f"source ({', '.join(runs)}): {source}" if len(sources) > 1 else f"source: {source}")
    return "\n".join(lines)


def _row_labels(chart: Chart, documents: Sequence[dict[str, Any]]) -> list[str]:
    labels: list[str] = []
    for document in documents:
        for row in document["rows"]:
            if row[chart.label] not in labels:
                labels.append(row[chart.label])
    return labels


def _targets(ax: Any, series: Series, labels: list[str], documents: Sequence[dict[str, Any]], chart: Chart,
             span: tuple[float, float]) -> list[float]:
    """The series' targets: one dotted line across the panel for a target every run gives all its rows
    (its `targets`), else a tick across the series' bars of each row that has one."""
    shared = {document.get("targets", {}).get(series.target) for document in documents}
    if len(shared) == 1 and isinstance(goal := shared.pop(), int | float):
        sign = "<=" if series.lower else ">="
        ax.axvline(goal, color="black", linewidth=1, linestyle=":", label=f"{series.label}: target {sign} {goal:g}x")
        return [float(goal)]
    goals = []
    for y, label in enumerate(labels):
        found = {(target(row, d, series), row.get("lower", series.lower))
                 for d in documents for row in d["rows"] if row[chart.label] == label} - {(None, False), (None, True)}
        for goal, lower in found:
            assert goal is not None
            goals.append(goal)
            ax.plot([goal, goal], [y + span[0], y + span[1]], color="black", linewidth=1.5, zorder=1.5)
            ax.annotate(("<= " if lower else ">= ") + f"{goal:g}x", (goal, y + span[0]), fontsize=5,
                        xytext=(2, 0), textcoords="offset points", va="bottom")
    return goals


def _bars(ax: Any, panel: Panel, chart: Chart, labels: list[str], documents: Sequence[dict[str, Any]]) -> list[float]:
    """One horizontal bar per (row, series, run) from parity (1.0) to its ratio, the ratio at its end
    ("not met" beside a ratio that misses its target), then the targets; returns what was drawn."""
    bars = [(s, d) for s in panel.series for d in documents]
    height = 0.8 / len(bars)
    drawn: list[float] = []
    for i, (series, document) in enumerate(bars):
        rows = {row[chart.label]: row for row in document["rows"]}
        offset = (i - (len(bars) - 1) / 2) * height
        values = [value(rows[name], series) if name in rows else math.nan for name in labels]
        texts = []
        for name, v in zip(labels, values):
            goal = target(rows[name], document, series) if name in rows else None
            missed = goal is not None and not math.isnan(v) and not met(rows[name], series, v, goal)
            texts.append("" if math.isnan(v) else f"{v:.2f}x" + (" not met" if missed else ""))
        drawn += [v for v in values if not math.isnan(v)]
        name = series.label if len(documents) == 1 else f"{series.label}, {run_name(document)}"
        bar = ax.barh([y + offset for y in range(len(labels))], [0.0 if math.isnan(v) else v - 1.0 for v in values],
                      height, left=1.0, label=name)
        ax.bar_label(bar, labels=texts, fontsize=6, padding=2)
    for s, series in enumerate(panel.series):
        first = (s * len(documents) - len(bars) / 2) * height
        drawn += _targets(ax, series, labels, documents, chart, (first, first + len(documents) * height))
    return drawn


def _axis(ax: Any, values: list[float]) -> None:
    """A log scale around parity, wide enough for every bar and its label."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ax.set_xscale("log")
    low = min([0.5, *values]) / 3
    high = max([2.0, *values]) * 3
    ax.set_xlim(low, high)
    ticks = [t for t in (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64) if low <= t <= high]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}x"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.axvline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.tick_params(axis="x", labelsize=7)


def draw(out: str | Path, paths: Sequence[str | Path]) -> Path:
    """The chart of the results files `paths` (runs of one benchmark), written as a PNG to `out`."""
    documents = [read_results(p) for p in paths]
    kinds = {d["bench"] for d in documents}
    if len(kinds) != 1:
        raise ValueError(f"one benchmark's runs per chart, not {sorted(kinds)}")
    chart = CHARTS[kinds.pop()]
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = _row_labels(chart, documents)
    bars_per_row = max(len(p.series) for p in chart.panels) * len(documents)
    width = 7.0 * len(chart.panels) if len(chart.panels) > 1 else 10.0
    height = 1.0 + len(labels) * max(0.45, 0.18 * bars_per_row)
    fig, axes = plt.subplots(1, len(chart.panels), figsize=(width, height), sharey=True, squeeze=False)
    legends = []
    for ax, panel in zip(axes[0], chart.panels):
        _axis(ax, _bars(ax, panel, chart, labels, documents))
        ax.set_yticks(range(len(labels)), [textwrap.fill(label, 36) for label in labels], fontsize=7)
        ax.set_ylim(len(labels) - 0.5, -0.5)  # the first row on top (the axes share it: set, not inverted)
        ax.set_title(panel.title, fontsize=8)
        legends.append(ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(0.0, -0.35 / height * 2),
                                 frameon=False))
    fig.suptitle(chart.title, fontsize=9)
    fig.tight_layout()
    # The footnote under the lowest legend; savefig's tight box takes in whatever lies outside the figure.
    fig.canvas.draw()
    lowest = min(legend.get_window_extent().y0 for legend in legends) / fig.dpi / height
    note = "\n".join(textwrap.fill(line, int(width * 19), subsequent_indent="    ")
                     for line in footnote(documents).splitlines())
    fig.text(0.01, lowest - 0.1 / height, note, fontsize=6, alpha=0.85, va="top")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, bbox_inches="tight", pad_inches=0.15)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="the PNG to write")
    parser.add_argument("results", nargs="+", help="results files (JSON) of one benchmark: one per run")
    args = parser.parse_args(argv)
    print(f"chart: {draw(args.out, args.results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
