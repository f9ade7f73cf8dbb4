"""Run outputs: a JSONL event per round, a summary JSON, a CSV and PNG plots.

The event log is appended and flushed every round, so a run that is killed keeps every round it
finished; :func:`truncate_events` drops rounds past a checkpoint when a run resumes.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

CSV_FIELDS = ("round", "virtual_time", "wall_time", "accuracy", "loss", "train_loss",
              "participants", "dropped", "stale", "rejected")


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (np.floating, np.integer)):
        return _clean(v.item())
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


class EventLog:
    """Appends one JSON object per line to ``events.jsonl``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = path.open("a")

    def write(self, event: dict[str, Any]) -> None:
        self._fh.write(json.dumps(_clean(event), sort_keys=False) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def read_events(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def truncate_events(path: Path, next_round: int) -> None:
    """Keep only events of rounds before ``next_round`` (used when resuming)."""
    kept = [e for e in read_events(path) if e.get("round", -1) < next_round]
    path.write_text("".join(json.dumps(e) + "\n" for e in kept))


def write_csv(path: Path, events: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for e in events:
            w.writerow({k: (len(e[k]) if isinstance(e.get(k), list) else e.get(k))
                        for k in CSV_FIELDS})


def summarize(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Final, best and last-5 accuracy, totals and throughput over the rounds in ``events``."""
    evald = [e for e in events if e.get("accuracy") is not None]
    accs = [e["accuracy"] for e in evald]
    last = events[-1] if events else {}
    updates = sum(len(e.get("participants", [])) for e in events)
    wall = last.get("wall_time") or 0.0
    return {
        "rounds": len(events),
        "final_accuracy": accs[-1] if accs else None,
        "final_loss": evald[-1]["loss"] if evald else None,
        "best_accuracy": max(accs) if accs else None,
        "last5_accuracy": float(np.mean(accs[-5:])) if accs else None,
        "virtual_time": last.get("virtual_time"),
        "wall_time": wall,
        "client_updates": updates,
        "dropped_total": sum(len(e.get("dropped", [])) for e in events),
        "stale_total": sum(len(e.get("stale", [])) for e in events),
        "rejected_total": sum(len(e.get("rejected", [])) for e in events),
        "updates_per_second": updates / wall if wall else None,
        "attack_success_rate": next((e["attack_success_rate"] for e in reversed(events)
                                     if e.get("attack_success_rate") is not None), None),
        **_detection_summary(events),
    }


def _detection_summary(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Precision / recall of the excluded clients over the run, and the benign false-rejection
    rate (None where undefined)."""
    tot = {k: sum(e.get("detection", {}).get(k, 0) for e in events)
           for k in ("tp", "fp", "fn", "tn")}
    tp, fp, fn, tn = tot["tp"], tot["fp"], tot["fn"], tot["tn"]
    first_ban: dict[int, int] = {}
    for e in events:
        for v in e.get("verdicts", []):
            if v.get("reason") == "banned":
                first_ban.setdefault(int(v["client"]), int(e["round"]))
    return {
        "detection_precision": tp / (tp + fp) if tp + fp else None,
        "detection_recall": tp / (tp + fn) if tp + fn else None,
        "detection_f1": 2 * tp / (2 * tp + fp + fn) if tp else (0.0 if fp + fn else None),
        "benign_false_rejection": fp / (fp + tn) if fp + tn else None,
        # round at which each banned client was first refused as banned (Siren's penalty)
        "first_ban_round": dict(sorted(first_ban.items())),
    }


def plot(path_dir: Path, events: list[dict[str, Any]], title: str = "") -> list[Path]:
    """Accuracy vs round and vs virtual time, as two PNG files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evald = [e for e in events if e.get("accuracy") is not None]
    if not evald:
        return []
    out = []
    for key, label, name in (("round", "round", "accuracy_vs_round.png"),
                             ("virtual_time", "virtual time (s)", "accuracy_vs_time.png")):
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
