"""The results table and the CSV of ``benchmarks/heterogeneity.py``: one row per comparison."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

#: the CSV's columns (per-seed values joined by ';')
CSV_FIELDS = (
    "case",
    "method",
    "baseline",
    "metric",
    "direction",
    "margin",
    "method_mean",
    "method_std",
    "baseline_mean",
    "baseline_std",
    "gain",
    "paired_diff_mean",
    "paired_diff_std",
    "p_value",
    "verdict",
    "reproduced",
    "wins",
    "seeds",
    "mode",
    "method_values",
    "baseline_values",
    "paired_diffs",
    "error",
    "claim",
)


def _pm(mean: float | None, std: float | None) -> str:
    return "-" if mean is None else f"{mean:.3f}±{std:.3f}"


def _signed(mean: float | None, std: float | None) -> str:
    return "-" if mean is None else f"{mean:+.3f}±{std:.3f}"


def _row(r: dict[str, Any]) -> tuple[str, ...]:
    n = len(r["method_values"])
    return (
        r["case"],
        f"{r['method']} vs {r['baseline']}",
        r["metric"],
        r["direction"] + (f" by {r['margin']:+g}" if r.get("margin") else ""),
        _pm(r["method_mean"], r["method_std"]),
        _pm(r["baseline_mean"], r["baseline_std"]),
        _signed(r["paired_diff_mean"], r["paired_diff_std"]),
        "-" if r["p_value"] is None else f"{r['p_value']:.3f}",
        r["verdict"] + (" (error)" if r["error"] and r["verdict"] != "failed" else ""),
        "yes" if r["reproduced"] else "no",
        "-" if r.get("wins") is None else f"{r['wins']}/{n}",
    )


def table(rows: list[dict[str, Any]]) -> str:
    """The results table: one line per comparison (``paired diff``: mean ± std over seeds of
    the per-seed difference, signed so that positive is the predicted direction; ``p``: the
    one-sided sign-flip p-value; ``1-std``: the one-standard-deviation rule)."""
    head = (
        "case",
        "method vs baseline",
        "metric",
        "predicted",
        "method",
        "baseline",
        "paired diff",
        "p",
        "verdict",
        "1-std",
        "wins",
    )
    body = [_row(r) for r in rows]
    width = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    lines = [
        "  ".join(x[i].ljust(width[i]) for i in range(len(head))).rstrip() for x in [head, *body]
    ]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(
                {
                    **r,
                    "method_values": ";".join(f"{v:g}" for v in r["method_values"]),
                    "baseline_values": ";".join(f"{v:g}" for v in r["baseline_values"]),
                    "paired_diffs": ";".join(f"{v:g}" for v in r["paired_diffs"]),
                }
            )
