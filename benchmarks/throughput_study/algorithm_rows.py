"""The rows of ``benchmarks/algorithm_throughput.py``: each arm's best rate, its ratio to
FedAvg's and, for an arm with a bar, to the bar's reference."""

from __future__ import annotations

from typing import Any

#: the arms with a bar, and the arm each is measured against
BARS = {
    "moon": "moon:mu=0",
    "fedfm": "fedavg",
    "fedfa": "fedavg",
    "fedala": "fedavg",
    "fedvb": "fedavg",
    "fedbn@norm=batch": "fedavg@norm=batch",
}
BAR = 0.7


def best_rows(runs: list[dict[str, dict[str, Any]]], arms: list[str]) -> list[dict[str, Any]]:
    """One row per arm: its best rate over the measurements, the ratio to FedAvg's best, every
    measurement's rate and the best samples/s; an arm of :data:`BARS` whose reference ran also
    its ``bar_reference`` and ``bar_ratio``."""
    best = {a: max(r[a]["updates_per_s"] for r in runs) for a in arms}
    ref = {a: BARS[a] for a in arms if BARS.get(a) in best}
    return [
        {
            "algorithm": a,
            "updates_per_s": best[a],
            "ratio_to_fedavg": best[a] / best["fedavg"],
            "bar_reference": ref.get(a),
            "bar_ratio": best[a] / best[ref[a]] if a in ref else None,
            "repeats": [r[a]["updates_per_s"] for r in runs],
            "samples_per_s": max(r[a]["samples_per_s"] for r in runs),
        }
        for a in arms
    ]


def print_rows(rows: list[dict[str, Any]]) -> None:
    """The table: updates/s, ratio to FedAvg and, for an arm with a bar, its ratio to the bar's
    reference and whether it meets :data:`BAR`."""
    hdr = f"{'algorithm':<24} {'updates/s':>10} {'/ fedavg':>9}  bar"
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        bar = ""
        if r.get("bar_ratio") is not None:
            ok = "ok" if r["bar_ratio"] >= BAR else f"below {BAR}"
            bar = f"{r['bar_ratio']:.2f} of {r['bar_reference']}: {ok}"
        print(
            f"{r['algorithm']:<24} {r['updates_per_s']:>10.1f} {r['ratio_to_fedavg']:>9.2f}  {bar}"
        )
