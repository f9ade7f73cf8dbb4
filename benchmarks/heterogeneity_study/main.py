"""``main`` of ``benchmarks/heterogeneity.py``: run every arm of the chosen cases for each seed,
compare, plot, print the table and write ``--json`` / ``--csv``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.heterogeneity_study import core
from benchmarks.heterogeneity_study.cli import parse_args
from benchmarks.heterogeneity_study.output import table, write_csv
from benchmarks.heterogeneity_study.plots import plot_case
from benchmarks.heterogeneity_study.stats import ALPHA, smallest_p
from benchmarks.stops import run_stoppable, whole, write_text


def main(argv: list[str] | None = None) -> int:
    """Run the chosen cases (or ``--list`` them); returns the exit code (2 on a case whose
    config cannot be built, with a one-line error)."""
    args = parse_args(argv)
    cases = args.cases
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
        print(f"error: case {j['case']} arm {j['arm']}: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    for j in jobs:
        j["resume"] = args.resume
    if args.resume:
        print(f"resume: {_kept(jobs, args.out)}", file=sys.stderr)
    return run_stoppable(
        "heterogeneity",
        lambda: _study(args, jobs, index),
        ("benchmarks/heterogeneity.py", argv, lambda: _kept(jobs, args.out)),
    )


def _kept(jobs: list[dict[str, Any]], out: Path) -> str:
    """What a stopped study keeps, for its stop line."""
    return f"{core.finished_runs(jobs)} of {len(jobs)} runs finished under {out}"


def _study(
    args: argparse.Namespace, jobs: list[dict[str, Any]], index: dict[tuple[str, str, int], str]
) -> int:
    """Run the jobs; compare, plot, print the table and write ``--json`` / ``--csv`` (each file
    whole). Returns the exit code."""
    cases = args.cases
    t0 = time.perf_counter()
    records = core.run_all(jobs, args.workers, progress=not args.no_progress)
    wall = time.perf_counter() - t0
    rows = core.compare(cases, index, records, args.seeds, args.quick)
    args.out.mkdir(parents=True, exist_ok=True)
    for case in cases:
        runs = {
            arm: [records[index[(case.name, arm, s)]] for s in range(args.seeds)]
            for arm in case.arms
        }
        with whole(args.out / f"{case.name}.png") as tmp:
            plot_case(case, runs, tmp)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_text(args.json, json.dumps({"cases": rows}, indent=2))
    if args.csv:
        with whole(args.csv) as tmp:
            write_csv(tmp, rows)
    print(
        f"{len(cases)} case(s), {args.seeds} seed(s), {'quick' if args.quick else 'full'} "
        f"settings, {len(jobs)} runs in {wall:.0f} s; mean±std over seeds; paired diff: "
        "per-seed method minus baseline, signed so that positive is the predicted direction; "
        f"p: one-sided exact sign-flip test; verdict: reproduced when p <= {ALPHA}, "
        "inconclusive when the mean paired diff is positive but p is larger, contradicted "
        "otherwise; 1-std: the gain exceeds the larger std; wins: seeds won"
    )
    if smallest_p(args.seeds) > ALPHA:
        print(
            f"note: with {args.seeds} seed(s) the smallest possible p is "
            f"1/{2**args.seeds} = {smallest_p(args.seeds):.3f} > {ALPHA}: no comparison can be "
            "'reproduced', at best 'inconclusive' (the full run's 5 seeds can)"
        )
    print(table(rows))
    for r in records.values():
        if r["error"]:
            print(f"error: {r['run_dir']}: {r['error']}", file=sys.stderr)
    written = [str(p) for p in (args.json, args.csv) if p]
    print(f"wrote {args.out}/<case>.png" + "".join(f", {w}" for w in written))
    return 0
