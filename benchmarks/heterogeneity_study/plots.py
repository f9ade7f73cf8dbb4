"""The per-case PNG of ``benchmarks/heterogeneity.py``: accuracy vs round of every arm, mean over
seeds with a +-1 std band, one panel per group of arms that the comparisons connect."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.heterogeneity_study.cases import Case
from benchmarks.heterogeneity_study.stats import stat


def panels(case: Case, arms: list[str]) -> list[list[str]]:
    """The arms grouped by the comparisons that connect them (one plot panel per group: the
    fedfm case's three partitions, the fedprox case's straggler levels), each group in the
    order of ``arms``, groups in the order of their first arm; an arm in no comparison is a
    group of its own."""
    root = {a: a for a in arms}

    def find(a: str) -> str:
        while root[a] != a:
            a = root[a]
        return a

    for c in case.comparisons:
        if c.method in root and c.baseline in root:
            root[find(c.method)] = find(c.baseline)
    groups: dict[str, list[str]] = {}
    for a in arms:
        groups.setdefault(find(a), []).append(a)
    return list(groups.values())


def plot_case(case: Case, runs: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """Accuracy vs round of every arm of ``case``: mean over seeds, +-1 sample std band; one
    panel per group of arms that the comparisons connect (:func:`panels`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key = (
        "client_accuracy_mean"
        if any(c.metric.startswith("client_accuracy") for c in case.comparisons)
        else "accuracy"
    )
    groups = panels(case, list(runs))
    cols = min(3, len(groups))
    rows = -(-len(groups) // cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(4.5 * cols + 2.0 * (cols == 1), 3.6 * rows), squeeze=False
    )
    for ax in axes.flat[len(groups) :]:
        ax.set_visible(False)
    for ax, group in zip(axes.flat, groups, strict=False):
        _panel(ax, {a: runs[a] for a in group}, key, plt.get_cmap("tab10"))
    ylabel = "mean per-client test accuracy" if key != "accuracy" else "global test accuracy"
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel)
    fig.suptitle(f"{case.name}: mean over seeds, band ±1 std")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _panel(ax: Any, runs: dict[str, list[dict[str, Any]]], key: str, cmap: Any) -> None:
    """One panel: the curves of ``runs``' arms."""
    for i, (arm, recs) in enumerate(runs.items()):
        per_round: dict[int, list[float]] = {}
        for r in recs:
            cv = r.get("curves") or {"round": [], key: []}
            for x, y in zip(cv["round"], cv[key], strict=True):
                if y is not None:
                    per_round.setdefault(x, []).append(y)
        xs = sorted(per_round)
        if not xs:
            continue
        mean = np.array([np.mean(per_round[x]) for x in xs])
        std = np.array([stat(per_round[x]).std for x in xs])
        color = cmap(i % 10)
        ax.plot(xs, mean, label=arm, color=color)
        ax.fill_between(xs, mean - std, mean + std, color=color, alpha=0.2)
    ax.set(xlabel="round", ylim=(0, 1))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
