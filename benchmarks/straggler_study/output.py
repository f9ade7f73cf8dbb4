"""Straggler study: the stdout table and results.json / results.csv.

Presents the records of :func:`benchmarks.straggler_study.report.study_results`; the PNGs are
:mod:`benchmarks.straggler_study.plots`'.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def _clean(v: Any) -> Any:
    """JSON-safe copy: numpy scalars and arrays to Python, NaN and infinities to None."""
    if isinstance(v, np.ndarray):
        return _clean(v.tolist())
    if isinstance(v, (np.floating, np.integer, np.bool_)):
        return _clean(v.item())
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, Mapping):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def _flat(rec: Mapping[str, Any]) -> dict[str, Any]:
    """One CSV row: ``time_to_target_h`` -> ``ttt_<f>_h``, ``targets`` -> ``target_<f>``,
    another dict ``k`` -> ``k_<sub>``, a list -> its JSON text."""
    row: dict[str, Any] = {}
    for k, v in rec.items():
        if isinstance(v, Mapping):
            fmt = {"time_to_target_h": "ttt_{}_h", "targets": "target_{}"}.get(k, k + "_{}")
            row.update({fmt.format(sub): x for sub, x in v.items()})
        else:
            row[k] = json.dumps(v) if isinstance(v, list) else v
    return row


def write_results(
    records: Sequence[Mapping[str, Any]],
    out_dir: Path | str,
    extra: Mapping[str, Any] | None = None,
) -> list[Path]:
    """Write ``results.json`` and ``results.csv`` into ``out_dir`` (created if missing).

    ``results.json`` is ``{"policies": [records...], **extra}``, strict JSON (NaN and
    infinities become null); ``results.csv`` has one row per record, the nested
    ``time_to_target_h`` as columns ``ttt_0.8_h``, ``ttt_0.9_h`` and ``targets`` as
    ``target_0.8``, ``target_0.9`` (None is an empty cell). Returns both paths.

    Raises
    ------
    ValueError
        If a record is not a dict or ``extra`` has a ``policies`` key.
    """
    if any(not isinstance(r, Mapping) for r in records):
        raise ValueError("write_results: every record must be a dict")
    extra = dict(extra or {})
    if "policies" in extra:
        raise ValueError("write_results: extra must not have a 'policies' key")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    doc = _clean({"policies": list(records), **extra})
    jpath, cpath = out / "results.json", out / "results.csv"
    jpath.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    rows = [_flat(r) for r in doc["policies"]]
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with cpath.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    return [jpath, cpath]


def by_policy(items: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """``items`` grouped by their ``policy``, in order of first appearance."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for it in items:
        out.setdefault(str(it["policy"]), []).append(it)
    return out


def mean_of(vals: Sequence[Any]) -> float | None:
    """Mean of the values that are not None (None if none is)."""
    v = [x for x in vals if x is not None]
    return float(np.mean(v)) if v else None


def fmt(v: float | None, spec: str, scale: float = 1.0) -> str:
    """``v * scale`` formatted by ``spec``; ``-`` for None."""
    return "-" if v is None else format(v * scale, spec)


def _seconds(v: float | None) -> str:
    return "-" if v is None else (f"{v:.3g}" if v < 1000 else f"{v:.0f}")


def _ttt_cell(vals: Sequence[float | None]) -> str:
    hit = [v for v in vals if v is not None]
    if not hit:
        return "n/a"
    txt = f"{np.mean(hit):.3g}"
    return txt if len(hit) == len(vals) else f"{txt} ({len(hit)}/{len(vals)})"


def table(records: Sequence[Mapping[str, Any]]) -> str:
    """The study table: one line per policy (in order of first appearance), means over seeds.

    Columns: policy, seeds, final acc, ttt <f> (h) for each target (mean of the seeds that
    reached it; ``n/a`` when none did, ``1.23 (2/3)`` when only 2 of 3 did), stale %, wasted %,
    Gini, median round s (mean of the per-seed medians), slow-q acc, fast-q acc; ``-`` when a
    value is None for every seed.
    """
    fracs = list((records[0].get("time_to_target_h") or {}) if records else ("0.8", "0.9"))
    head = [
        "policy",
        "seeds",
        "final acc",
        *[f"ttt {f} (h)" for f in fracs],
        "stale %",
        "wasted %",
        "Gini",
        "median round s",
        "slow-q acc",
        "fast-q acc",
    ]
    rows = []
    for policy, rs in by_policy(records).items():
        col = {
            k: [r.get(k) for r in rs]
            for k in (
                "final_accuracy",
                "stale_share",
                "wasted_compute_share",
                "participation_gini",
                "median_round_s",
                "slow_q_accuracy",
                "fast_q_accuracy",
            )
        }
        ttt = [_ttt_cell([(r.get("time_to_target_h") or {}).get(f) for r in rs]) for f in fracs]
        rows.append(
            [
                policy,
                str(len(rs)),
                fmt(mean_of(col["final_accuracy"]), ".3f"),
                *ttt,
                fmt(mean_of(col["stale_share"]), ".1f", 100),
                fmt(mean_of(col["wasted_compute_share"]), ".1f", 100),
                fmt(mean_of(col["participation_gini"]), ".3f"),
                _seconds(mean_of(col["median_round_s"])),
                fmt(mean_of(col["slow_q_accuracy"]), ".3f"),
                fmt(mean_of(col["fast_q_accuracy"]), ".3f"),
            ]
        )
    widths = [max(len(str(x)) for x in c) for c in zip(head, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    out = [line(head), "-" * len(line(head))]
    return "\n".join(out + [line(r) for r in rows])
