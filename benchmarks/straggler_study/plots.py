"""Straggler study: the PNG plots of :func:`plot_study`.

Plots use matplotlib's ``Figure`` directly (the Agg canvas, no pyplot state).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.straggler_study.output import by_policy, fmt, mean_of
from benchmarks.straggler_study.report import run_metrics

FIGSIZE = (6.5, 4.0)
DPI = 110


#: the files :func:`plot_study` writes
PLOTS = (
    "accuracy_vs_time.png",
    "accuracy_vs_round.png",
    "round_durations.png",
    "participation_hist.png",
    "quartile_accuracy.png",
)


def _hold(xs: np.ndarray, ys: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Accuracy held from each evaluation to the next: ys at the last xs <= each grid point."""
    return ys[np.searchsorted(xs, grid, side="right") - 1]


def _time_mean(curves: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Mean over seeds on the union of their evaluation times, where every seed has one."""
    lo, hi = max(c[0][0] for c in curves), min(c[0][-1] for c in curves)
    grid = np.unique(np.concatenate([c[0] for c in curves]))
    grid = grid[(grid >= lo) & (grid <= hi)]
    return grid, np.mean([_hold(x, y, grid) for x, y in curves], axis=0)


def _new_fig(
    figsize: tuple[float, float] = FIGSIZE, nrows: int = 1, ncols: int = 1
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


def _curves_plot(
    per: dict[str, list[dict[str, Any]]],
    colors: dict[str, Any],
    targets: Mapping[str, Any],
    by_time: bool,
    path: Path,
) -> Path:
    fig, axs = _new_fig()
    ax = axs[0][0]
    drawn = False
    for policy, ms in per.items():
        curves = []
        for m in ms:
            if m["curve"]:
                rnd, hours, acc = (
                    np.asarray(v, dtype=float) for v in zip(*m["curve"], strict=True)
                )
                x = hours if by_time else rnd + 1
                order = np.argsort(x, kind="stable")
                curves.append((x[order], acc[order]))
        if not curves:  # no evaluated step in any seed: left out of this plot
            continue
        drawn = True
        for x, y in curves:
            ax.plot(
                x,
                y,
                color=colors[policy],
                lw=0.7,
                alpha=0.35,
                drawstyle="steps-post" if by_time else "default",
            )
        if by_time:
            gx, gy = _time_mean(curves)
        else:
            maps = [dict(zip(x.tolist(), y.tolist(), strict=True)) for x, y in curves]
            common = sorted(set.intersection(*(set(mp) for mp in maps)))
            gx = np.asarray(common)
            gy = np.asarray([np.mean([mp[r] for mp in maps]) for r in common])
        ax.plot(
            gx,
            gy,
            color=colors[policy],
            lw=1.8,
            label=f"{policy} ({len(curves)})",
            drawstyle="steps-post" if by_time else "default",
        )
    for frac, t in targets.items():
        if t is not None:
            ax.axhline(t, color="grey", ls="--", lw=0.8)
            ax.annotate(
                f"{frac} x best",
                (0.01, t),
                xycoords=("axes fraction", "data"),
                fontsize=7,
                color="grey",
                va="bottom",
            )
    what = "virtual time" if by_time else "server step"
    ax.set(
        xlabel="virtual time (hours)" if by_time else "server step (round, log scale)",
        ylabel="test accuracy",
        ylim=(0, 1),
        title=f"accuracy vs {what} (thin: seeds, bold: mean over seeds)",
    )
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
    ax.set(
        xlabel="policy",
        ylabel="round duration (virtual s, log scale)",
        title="round durations, all seeds (box: quartiles, whiskers: 5-95th pct)",
    )
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)


def _participation_plot(
    per: dict[str, list[dict[str, Any]]], colors: dict[str, Any], path: Path
) -> Path:
    from matplotlib.ticker import MaxNLocator

    n = len(per)
    ncols = min(4, max(n, 1))
    nrows = max(1, math.ceil(n / ncols))
    fig, axs = _new_fig((3.0 * ncols, 2.4 * nrows + 0.4), nrows, ncols)
    flat = [ax for row in axs for ax in row]
    for ax, (policy, ms) in zip(flat, per.items(), strict=False):
        counts = sorted({c for m in ms for c in m["participation_histogram"]})
        g = mean_of([m["participation_gini"] for m in ms])
        ax.set_title(f"{policy} (Gini {fmt(g, '.2f')})", fontsize=9)
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
    vals = {
        p: (
            mean_of([r.get("slow_q_accuracy") for r in rs]),
            mean_of([r.get("fast_q_accuracy") for r in rs]),
        )
        for p, rs in by_policy(records).items()
    }
    vals = {p: v for p, v in vals.items() if v != (None, None)}
    if vals:
        x = np.arange(len(vals))
        for k, (label, color) in enumerate(
            (("slowest quartile", "tab:red"), ("fastest quartile", "tab:blue"))
        ):
            ys = [np.nan if v[k] is None else v[k] for v in vals.values()]
            ax.bar(x + (k - 0.5) * 0.38, ys, width=0.38, label=label, color=color)
        ax.set_xticks(x, list(vals), rotation=30, ha="right", fontsize=8)
        ax.set_xlim(-0.8, len(vals) - 0.2)
        ax.legend(fontsize=8)
    else:
        _empty(ax, "no quartile accuracy recorded")
    ax.set(
        xlabel="policy",
        ylabel="test accuracy on the quartile's data",
        ylim=(0, 1),
        title="slowest vs fastest device quartile (mean over seeds)",
    )
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)


def plot_study(
    runs: Sequence[Mapping[str, Any]], records: Sequence[Mapping[str, Any]], out_dir: Path | str
) -> list[Path]:
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
