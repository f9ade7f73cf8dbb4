"""The PNG of ``benchmarks/scheduler.py``: per task, bars of the live round time per placement
(error bars: std over rounds); predicted vs measured seconds of every held-out chunk (log-log)
for the GBDT and the linear fit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def plot(live: list[dict[str, Any]], points: dict[str, dict[str, np.ndarray]], path: Path) -> None:
    """Write the figure to ``path`` (panels for the parts that ran; nothing if none did)."""
    tasks = list(dict.fromkeys(r["task"] for r in live))
    panels = len(tasks) + (2 if points else 0)
    if not panels:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.8), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=False):
        recs = [r for r in live if r["task"] == task]
        ax.bar(
            [r["placement"] for r in recs],
            [r["round_s"] for r in recs],
            yerr=[r["round_s_std"] for r in recs],
            color="tab:blue",
            capsize=3,
        )
        ax.set_title(f"{task}: training wall time per round")
        ax.set_ylabel("seconds")
    for ax, model in zip(axes[0][len(tasks) :], ("gbdt", "linear"), strict=False):
        lo, hi = np.inf, 0.0
        for task, p in points.items():
            ax.scatter(p["measured"], p[model], s=8, alpha=0.6, label=task)
            both = np.concatenate([p["measured"], p[model]])
            lo, hi = min(lo, float(both.min())), max(hi, float(both.max()))
        ax.plot([lo, hi], [lo, hi], color="gray", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"held-out chunks: {model}")
        ax.set_xlabel("measured seconds")
        ax.set_ylabel("predicted seconds")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
