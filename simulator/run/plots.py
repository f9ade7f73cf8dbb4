"""A run's plots: test accuracy against round and against virtual time (``--plots``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(path_dir: Path, events: list[dict[str, Any]], title: str = "") -> list[Path]:
    """Accuracy vs round and vs virtual time, as two PNG files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evald = [e for e in events if e.get("accuracy") is not None]
    if not evald:
        return []
    out = []
    for key, label, name in (
        ("round", "round", "accuracy_vs_round.png"),
        ("virtual_time", "virtual time (s)", "accuracy_vs_time.png"),
    ):
        fig, ax = plt.subplots(figsize=(5.5, 3.5))
        xs = [e[key] + (1 if key == "round" else 0) for e in evald]
        ax.plot(xs, [e["accuracy"] for e in evald], marker="o", ms=3)
        ax.set_xlabel(label)
        ax.set_ylabel("test accuracy")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.set_title(title, fontsize=9)
        fig.tight_layout()
        p = path_dir / name
        fig.savefig(p, dpi=110)
        plt.close(fig)
        out.append(p)
    return out
