"""Straggler study: the stdout table, results.json / results.csv and the PNG plots.

Presents the records of :func:`benchmarks.straggler_report.study_results` (imported from there,
which re-exports these functions). Plots use matplotlib's ``Figure`` directly (the Agg canvas, no
pyplot state).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

FIGSIZE = (6.5, 4.0)
DPI = 110


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


def write_results(records: Sequence[Mapping[str, Any]], out_dir: Path | str,
                  extra: Mapping[str, Any] | None = None) -> list[Path]:
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


def _by_policy(items: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = {}
    for it in items:
        out.setdefault(str(it["policy"]), []).append(it)
    return out


def _mean(vals: Sequence[Any]) -> float | None:
    v = [x for x in vals if x is not None]
    return float(np.mean(v)) if v else None


def _fmt(v: float | None, spec: str, scale: float = 1.0) -> str:
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
    head = ["policy", "seeds", "final acc", *[f"ttt {f} (h)" for f in fracs], "stale %",
            "wasted %", "Gini", "median round s", "slow-q acc", "fast-q acc"]
    rows = []
    for policy, rs in _by_policy(records).items():
        col = {k: [r.get(k) for r in rs] for k in (
            "final_accuracy", "stale_share", "wasted_compute_share", "participation_gini",
            "median_round_s", "slow_q_accuracy", "fast_q_accuracy")}
        ttt = [_ttt_cell([(r.get("time_to_target_h") or {}).get(f) for r in rs]) for f in fracs]
        rows.append([policy, str(len(rs)), _fmt(_mean(col["final_accuracy"]), ".3f"), *ttt,
                     _fmt(_mean(col["stale_share"]), ".1f", 100),
                     _fmt(_mean(col["wasted_compute_share"]), ".1f", 100),
                     _fmt(_mean(col["participation_gini"]), ".3f"),
                     _seconds(_mean(col["median_round_s"])),
                     _fmt(_mean(col["slow_q_accuracy"]), ".3f"),
                     _fmt(_mean(col["fast_q_accuracy"]), ".3f")])
    widths = [max(len(str(x)) for x in c) for c in zip(head, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

    out = [line(head), "-" * len(line(head))]
    return "\n".join(out + [line(r) for r in rows])


def _hold(xs: np.ndarray, ys: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Accuracy held from each evaluation to the next: ys at the last xs <= each grid point."""
    return ys[np.searchsorted(xs, grid, side="right") - 1]


def _time_mean(curves: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Mean over seeds on the union of their evaluation times, where every seed has one."""
    lo, hi = max(c[0][0] for c in curves), min(c[0][-1] for c in curves)
    grid = np.unique(np.concatenate([c[0] for c in curves]))
    grid = grid[(grid >= lo) & (grid <= hi)]
    return grid, np.mean([_hold(x, y, grid) for x, y in curves], axis=0)


def _new_fig(figsize: tuple[float, float] = FIGSIZE, nrows: int = 1, ncols: int = 1
             ) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, squeeze=False)


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    return path


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)


def _curves_plot(per: dict[str, list[dict[str, Any]]], colors: dict[str, Any],
                 targets: Mapping[str, Any], by_time: bool, path: Path) -> Path:
    fig, axs = _new_fig()
    ax = axs[0][0]
    drawn = False
    for policy, ms in per.items():
        curves = []
        for m in ms:
            if m["curve"]:
                rnd, hours, acc = (np.asarray(v, dtype=float) for v in zip(*m["curve"],
                                                                           strict=True))
                x = hours if by_time else rnd + 1
                order = np.argsort(x, kind="stable")
                curves.append((x[order], acc[order]))
        if not curves:  # no evaluated step in any seed: left out of this plot
            continue
        drawn = True
        for x, y in curves:
            ax.plot(x, y, color=colors[policy], lw=0.7, alpha=0.35,
                    drawstyle="steps-post" if by_time else "default")
        if by_time:
            gx, gy = _time_mean(curves)
        else:
            maps = [dict(zip(x.tolist(), y.tolist(), strict=True)) for x, y in curves]
            common = sorted(set.intersection(*(set(mp) for mp in maps)))
            gx = np.asarray(common)
            gy = np.asarray([np.mean([mp[r] for mp in maps]) for r in common])
        ax.plot(gx, gy, color=colors[policy], lw=1.8, label=f"{policy} ({len(curves)})",
                drawstyle="steps-post" if by_time else "default")
    for frac, t in targets.items():
        if t is not None:
            ax.axhline(t, color="grey", ls="--", lw=0.8)
            ax.annotate(f"{frac} x best", (0.01, t), xycoords=("axes fraction", "data"),
                        fontsize=7, color="grey", va="bottom")
    what = "virtual time" if by_time else "server step"
    ax.set(xlabel="virtual time (hours)" if by_time else "server step (round, log scale)",
           ylabel="test accuracy", ylim=(0, 1),
           title=f"accuracy vs {what} (thin: seeds, bold: mean over seeds)")
    if not by_time:
        ax.set_xscale("log")
    if drawn:
        ax.legend(fontsize=7, title="policy (seeds)", title_fontsize=7)
    else:
        _empty(ax, "no evaluated step")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def _durations_plot(per: dict[str, list[dict[str, Any]]], path: Path) -> Path:
    fig, axs = _new_fig()
    ax = axs[0][0]
    data = {p: np.concatenate([m["round_durations_s"] for m in ms]) for p, ms in per.items()}
    data = {p: d[d > 0] for p, d in data.items() if np.any(d > 0)}  # log axis: positive only
    if data:
        ax.boxplot(list(data.values()), whis=(5, 95), showfliers=False)
        ax.set_xticks(range(1, len(data) + 1), list(data), rotation=30, ha="right", fontsize=8)
        ax.set_yscale("log")
    else:
        _empty(ax, "no positive round duration")
    ax.set(xlabel="policy", ylabel="round duration (virtual s, log scale)",
           title="round durations, all seeds (box: quartiles, whiskers: 5-95th pct)")
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)


def _participation_plot(per: dict[str, list[dict[str, Any]]], colors: dict[str, Any],
                        path: Path) -> Path:
    from matplotlib.ticker import MaxNLocator

    n = len(per)
    ncols = min(4, max(n, 1))
    nrows = max(1, math.ceil(n / ncols))
    fig, axs = _new_fig((3.0 * ncols, 2.4 * nrows + 0.4), nrows, ncols)
    flat = [ax for row in axs for ax in row]
    for ax, (policy, ms) in zip(flat, per.items(), strict=False):
        counts = sorted({c for m in ms for c in m["participation_histogram"]})
        g = _mean([m["participation_gini"] for m in ms])
        ax.set_title(f"{policy} (Gini {_fmt(g, '.2f')})", fontsize=9)
        ax.set_xlabel("aggregations per device", fontsize=8)
        ax.set_ylabel("devices (mean over seeds)", fontsize=8)
        if not counts:
            _empty(ax, "no device selected")
            continue
        ys = [np.mean([m["participation_histogram"].get(c, 0) for m in ms]) for c in counts]
        ax.bar(counts, ys, color=colors[policy], width=0.8)
        ax.set_xlim(counts[0] - 0.7, counts[-1] + 0.7)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=7)
    for ax in flat[n:]:
        ax.set_visible(False)
    fig.suptitle("participation histogram per policy (devices ever selected)", fontsize=10)
    return _save(fig, path)


def _quartile_plot(records: Sequence[Mapping[str, Any]], path: Path) -> Path:
    fig, axs = _new_fig()
    ax = axs[0][0]
    vals = {p: (_mean([r.get("slow_q_accuracy") for r in rs]),
                _mean([r.get("fast_q_accuracy") for r in rs]))
            for p, rs in _by_policy(records).items()}
    vals = {p: v for p, v in vals.items() if v != (None, None)}
    if vals:
        x = np.arange(len(vals))
        for k, (label, color) in enumerate((("slowest quartile", "tab:red"),
                                            ("fastest quartile", "tab:blue"))):
            ys = [np.nan if v[k] is None else v[k] for v in vals.values()]
            ax.bar(x + (k - 0.5) * 0.38, ys, width=0.38, label=label, color=color)
        ax.set_xticks(x, list(vals), rotation=30, ha="right", fontsize=8)
        ax.set_xlim(-0.8, len(vals) - 0.2)
        ax.legend(fontsize=8)
    else:
        _empty(ax, "no quartile accuracy recorded")
    ax.set(xlabel="policy", ylabel="test accuracy on the quartile's data", ylim=(0, 1),
           title="slowest vs fastest device quartile (mean over seeds)")
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)


def plot_study(runs: Sequence[Mapping[str, Any]], records: Sequence[Mapping[str, Any]],
               out_dir: Path | str) -> list[Path]:
    """Write the study's PNGs into ``out_dir`` (created if missing) and return their paths.

    * ``accuracy_vs_time.png``: accuracy vs virtual hours, each seed thin and the mean over
      seeds bold (on the union of the seeds' evaluation times between the latest first and the
      earliest last evaluation, each seed's accuracy held until its next evaluation), targets
      dashed;
    * ``accuracy_vs_round.png``: accuracy vs server step (1-based, log x), the mean over seeds
      on the steps every seed evaluated;
    * ``round_durations.png``: box plot of round durations per policy, all seeds pooled, log y
      (steps of zero duration cannot be drawn on it and are left out);
    * ``participation_hist.png``: per policy, the number of devices (mean over seeds) with each
      participation count;
    * ``quartile_accuracy.png``: mean slow- and fast-quartile accuracy per policy.

    A policy with no evaluated step (or no quartile accuracy) is left out of the plots that need
    it; a plot with nothing to draw says so in its middle.
    """
    from benchmarks.straggler_report import run_metrics

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    per: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        per.setdefault(str(r["policy"]), []).append(run_metrics(r["events"]))
    palette = [f"C{i}" for i in range(10)]
    colors = {p: palette[i % 10] for i, p in enumerate(per)}
    targets = dict(records[0].get("targets") or {}) if records else {}
    return [
        _curves_plot(per, colors, targets, True, out / "accuracy_vs_time.png"),
        _curves_plot(per, colors, targets, False, out / "accuracy_vs_round.png"),
        _durations_plot(per, out / "round_durations.png"),
        _participation_plot(per, colors, out / "participation_hist.png"),
        _quartile_plot(records, out / "quartile_accuracy.png"),
    ]
