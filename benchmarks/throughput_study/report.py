"""The throughput study's table and bar chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def print_table(results: list[dict[str, Any]]) -> None:
    """Updates/s of each system per task, FedSentry's speed-up over Flower and its share of
    the fused ceiling."""
    hdr = (
        f"{'task':<29} {'fedsentry upd/s':>15} {'flower upd/s':>13} {'fused upd/s':>12} "
        f"{'x flower':>9} {'/ fused':>8}"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        fl = r["flower"]["updates_per_s"] if r["flower"] else float("nan")
        sp = r["speedup_vs_flower"] if r["speedup_vs_flower"] else float("nan")
        print(
            f"{r['name']:<29} {r['fedsentry']['updates_per_s']:>15.1f} {fl:>13.1f} "
            f"{r['fused']['updates_per_s']:>12.1f} {sp:>9.1f} {r['fraction_of_fused']:>8.2f}"
        )


def plot(results: list[dict[str, Any]], path: Path) -> None:
    """Grouped bars (log scale): client updates/s of each system on each task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = [("fedsentry", "FedSentry"), ("flower", "Flower 1.41"), ("fused", "fused ref.")]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.27
    for j, (key, label) in enumerate(systems):
        vals = [r[key]["updates_per_s"] if r[key] else 0.0 for r in results]
        ax.bar([i + (j - 1) * width for i in range(len(results))], vals, width, label=label)
    ax.set_xticks(range(len(results)), [r["name"] for r in results], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("client updates / s")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
