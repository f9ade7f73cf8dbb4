"""Heterogeneity benchmark: does each seed paper's claim reproduce on FedSentry?

Each case (one file in ``benchmarks/heterogeneity_cases/``, found automatically) states a seed's
claim, the arms that check it (FedSentry runs, ``backend local``, small enough for a 2-core CPU)
and the comparisons: a method arm against a baseline arm on one metric, with the direction the
seed predicts. Every arm runs for seeds ``0..N-1``; runs with identical configs (a baseline that
two cases share) run once. The script prints a table (method and baseline mean +- std over
seeds, the seed's predicted direction and our verdict) and writes into ``--out`` (default
``runs/heterogeneity``) the runs (``runs/<case>/<arm>-s<seed>/``) and one plot per case
(``<case>.png``: accuracy vs round, mean over seeds with a +-1 std band, one panel per group of
arms that the comparisons connect; the per-client mean accuracy for cases compared on
per-client metrics).

Verdict: with ``m``, ``b`` the method's and the baseline's means over seeds and ``s_m``, ``s_b``
their sample standard deviations (ddof 1), ``d = m - b`` when the seed predicts *higher*
(``b - m`` for *lower*); **reproduced** when ``d > max(s_m, s_b)``, else **not reproduced**
(also when a run failed).

Usage::

    python benchmarks/heterogeneity.py --quick                  # every case, 3 seeds
    python benchmarks/heterogeneity.py --case fedbn --case scaffold --json out.json
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import heterogeneity_core as core  # noqa: E402
from benchmarks.heterogeneity_cases import CASES, Case  # noqa: E402
from simulator.cli import OneLineParser  # noqa: E402

#: the CSV's columns (per-seed values joined by ';')
CSV_FIELDS = ("case", "method", "baseline", "metric", "direction", "method_mean", "method_std",
              "baseline_mean", "baseline_std", "gain", "reproduced", "wins", "seeds", "mode",
              "method_values", "baseline_values", "error", "claim")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(description="Reproduce the seed papers' heterogeneity claims: one case "
                                  "per claim, FedSentry runs per arm and seed, a verdict per "
                                  "comparison (reproduced when the method beats the baseline "
                                  "in the predicted direction by more than the larger of the "
                                  "two standard deviations over seeds).")
    p.add_argument("--case", action="append", default=None, metavar="NAME",
                   help=f"run this case (repeatable; default: all): {list(CASES)}")
    p.add_argument("--quick", action="store_true",
                   help="each case's quick settings (fewer rounds/epochs; all cases in "
                        "under 15 minutes on 2 cores) instead of its full ones")
    p.add_argument("--seeds", type=int, default=3,
                   help="seeds per arm, 0..N-1 (default %(default)s)")
    p.add_argument("--workers", type=int, default=2,
                   help="runs in parallel, one process and one torch thread each (1 = in "
                        "this process; default %(default)s)")
    p.add_argument("--json", type=Path, default=None, metavar="FILE",
                   help='write {"cases": [one entry per comparison]} to FILE')
    p.add_argument("--csv", type=Path, default=None, metavar="FILE",
                   help="write the comparisons as CSV to FILE")
    p.add_argument("--out", type=Path, default=Path("runs/heterogeneity"), metavar="DIR",
                   help="directory of the runs and the per-case plots "
                        "(default %(default)s)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--list", action="store_true",
                   help="print each case's name, claim and comparisons, and exit")
    args = p.parse_args(argv)
    unknown = [c for c in args.case or [] if c not in CASES]
    if unknown:
        p.error(f"unknown case {unknown[0]!r}; valid: {list(CASES)}")
    if args.seeds < 1 or args.workers < 1:
        p.error("--seeds and --workers must be >= 1")
    args.case = list(dict.fromkeys(args.case or CASES))
    return args


def _pm(mean: float | None, std: float | None) -> str:
    return "-" if mean is None else f"{mean:.3f}±{std:.3f}"


def table(rows: list[dict[str, Any]]) -> str:
    """The results table: one line per comparison."""
    head = ("case", "method vs baseline", "metric", "method", "baseline", "predicted",
            "verdict", "wins")
    body = [(r["case"], f"{r['method']} vs {r['baseline']}", r["metric"],
             _pm(r["method_mean"], r["method_std"]), _pm(r["baseline_mean"], r["baseline_std"]),
             r["direction"], ("reproduced" if r["reproduced"] else "not reproduced")
             + (" (error)" if r["error"] else ""),
             "-" if r.get("wins") is None else f"{r['wins']}/{len(r['method_values'])}")
            for r in rows]
    width = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(x[i].ljust(width[i]) for i in range(len(head))).rstrip()
             for x in [head, *body]]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({**r, "method_values": ";".join(f"{v:g}" for v in r["method_values"]),
                        "baseline_values": ";".join(f"{v:g}" for v in r["baseline_values"])})


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

    key = ("client_accuracy_mean" if any(c.metric.startswith("client_accuracy")
                                         for c in case.comparisons) else "accuracy")
    groups = panels(case, list(runs))
    cols = min(3, len(groups))
    rows = -(-len(groups) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols + 2.0 * (cols == 1), 3.6 * rows),
                             squeeze=False)
    for ax in axes.flat[len(groups):]:
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
        std = np.array([core.stat(per_round[x]).std for x in xs])
        color = cmap(i % 10)
        ax.plot(xs, mean, label=arm, color=color)
        ax.fill_between(xs, mean - std, mean + std, color=color, alpha=0.2)
    ax.set(xlabel="round", ylim=(0, 1))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cases = [CASES[c] for c in args.case]
    if args.list:
        for c in cases:
            print(f"{c.name}: {c.claim}")
            for k in c.comparisons:
                print(f"    {k.method} vs {k.baseline}: {k.metric}, predicted {k.direction}")
        return 0
    jobs, index = core.make_jobs(cases, args.quick, args.seeds, args.out)
    try:
        from simulator.config.sections import build_config

        for j in jobs:  # fail fast on a case whose config cannot be built
            build_config(flat=j["flat"])
    except ValueError as e:
        print(f"error: case {j['case']} arm {j['arm']}: {str(e).splitlines()[0]}",
              file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    records = core.run_all(jobs, args.workers, progress=not args.no_progress)
    wall = time.perf_counter() - t0
    rows = core.compare(cases, index, records, args.seeds, args.quick)
    args.out.mkdir(parents=True, exist_ok=True)
    for case in cases:
        runs = {arm: [records[index[(case.name, arm, s)]] for s in range(args.seeds)]
                for arm in case.arms}
        plot_case(case, runs, args.out / f"{case.name}.png")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"cases": rows}, indent=2))
    if args.csv:
        write_csv(args.csv, rows)
    print(f"{len(cases)} case(s), {args.seeds} seed(s), {'quick' if args.quick else 'full'} "
          f"settings, {len(jobs)} runs in {wall:.0f} s; mean±std over seeds; reproduced: the "
          "method beats the baseline in the predicted direction by more than the larger std; "
          "wins: seeds won in that direction (information, not the rule)")
    print(table(rows))
    for r in records.values():
        if r["error"]:
            print(f"error: {r['run_dir']}: {r['error']}", file=sys.stderr)
    written = [str(p) for p in (args.json, args.csv) if p]
    print(f"wrote {args.out}/<case>.png" + "".join(f", {w}" for w in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
