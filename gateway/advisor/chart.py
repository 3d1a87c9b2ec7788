"""The advisor's chart (PNG): miss-ratio curves, and cost against latency per split."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gateway.advisor.model import GiB, Outcome


def draw(
    path: str, curves: Mapping[str, Sequence[tuple[int, float, float]]], outcomes: Sequence[Outcome],
    chosen: Outcome, *, title: str = "",
) -> None:
    """Left: byte miss ratio against cache size per policy. Right: mean latency against
    monthly cost, one point per (policy, memory share), the recommendation circled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (mrc, cp) = plt.subplots(1, 2, figsize=(12, 4.8))
    for policy, curve in curves.items():
        mrc.plot([size / GiB for size, _, _ in curve], [miss for _, miss, _ in curve], marker="o", label=policy)
    mrc.set_xscale("log", base=2)
    mrc.set_xlabel("cache size (GiB, one tier)")
    mrc.set_ylabel("byte miss ratio")
    mrc.set_ylim(0, 1)
    mrc.grid(True, alpha=0.3)
    mrc.legend()
    mrc.set_title("miss-ratio curves")
    for policy in dict.fromkeys(o.policy for o in outcomes):
        points = [o for o in outcomes if o.policy == policy]
        cp.plot([o.cost for o in points], [o.mean_latency * 1000 for o in points], marker="s", label=policy)
        for o in points:
            share = o.memory / (o.memory + o.ssd) if o.memory + o.ssd else 0
            cp.annotate(f"{share:.0%}", (o.cost, o.mean_latency * 1000), fontsize=7,
                        textcoords="offset points", xytext=(3, 3))
    cp.scatter([chosen.cost], [chosen.mean_latency * 1000], s=220, facecolors="none", edgecolors="red",
               label=f"recommended ({chosen.policy})")
    costs = [o.cost for o in outcomes if o.cost > 0]
    if costs and max(costs) > 10 * min(costs):
        cp.set_xscale("log")
    cp.set_xlabel("$ per month")
    cp.set_ylabel("estimated mean GET latency (ms)")
    cp.grid(True, alpha=0.3)
    cp.legend()
    cp.set_title("cost and latency per memory share of the budget")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
