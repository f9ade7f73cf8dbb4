"""Command line of ``benchmarks/heterogeneity.py`` (every flag explained in ``--help``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.heterogeneity_study.cases import CASES
from benchmarks.heterogeneity_study.stats import MAX_SEEDS
from simulator.cli import OneLineParser
from simulator.run.runlock import make_out_dir, writable_file

#: seeds per arm when ``--seeds`` is not given: quick, full
SEEDS = {True: 3, False: 5}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The checked command line (one-line errors, exit 2); ``case``: the chosen case names
    (default: every registered case), ``cases``: their :class:`Case` objects."""
    p = OneLineParser(
        description="Reproduce the seed papers' heterogeneity claims: one case "
        "per claim, FedSentry runs per arm and seed, a verdict per "
        "comparison from the paired per-seed differences: reproduced when "
        "a one-sided exact sign-flip test gives p <= 0.05 in the "
        "predicted direction, inconclusive when the mean difference goes "
        "that way but p > 0.05, contradicted otherwise."
    )
    p.add_argument(
        "--case",
        action="append",
        default=None,
        metavar="NAME",
        help=f"run this case (repeatable; default: all): {list(CASES)}",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="each case's quick settings (fewer rounds/epochs, 3 seeds; all cases "
        "in under 20 minutes on 2 cores) instead of its full ones (5 seeds)",
    )
    p.add_argument(
        "--seeds",
        type=int,
        default=None,
        help=f"seeds per arm, 0..N-1, 1 to {MAX_SEEDS} (default {SEEDS[True]} with --quick, "
        f"else {SEEDS[False]}; the paired test needs 5 for p <= 0.05: its smallest p is "
        "1/2^N)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=2,
        help="runs in parallel, one process and one torch thread each (1 = in "
        "this process; default %(default)s)",
    )
    p.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="FILE",
        help='write {"cases": [one entry per comparison]} to FILE',
    )
    p.add_argument(
        "--csv",
        type=Path,
        default=None,
        metavar="FILE",
        help="write the comparisons as CSV to FILE",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("runs/heterogeneity"),
        metavar="DIR",
        help="directory of the runs and the per-case plots (default %(default)s)",
    )
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar: one line per finished run on stderr instead (for logs)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="keep the runs of the same config that an earlier study finished under --out (a "
        "study stopped part-way: Ctrl-C, a time limit) and run only the others",
    )
    p.add_argument(
        "--list",
        action="store_true",
        help="print each case's name, claim and comparisons, and exit",
    )
    args = p.parse_args(argv)
    unknown = [c for c in args.case or [] if c not in CASES]
    if unknown:
        p.error(f"unknown case {unknown[0]!r}; valid: {list(CASES)}")
    if args.seeds is None:
        args.seeds = SEEDS[args.quick]
    if not 1 <= args.seeds <= MAX_SEEDS:
        p.error(f"--seeds must be in 1..{MAX_SEEDS} (the exact test enumerates 2^N patterns)")
    if args.workers < 1:
        p.error("--workers must be >= 1")
    if not args.list:  # where the runs and results go, checked before any run
        try:
            for path, flag in ((args.json, "--json"), (args.csv, "--csv")):
                if path:
                    writable_file(path, flag)
            make_out_dir(args.out, "--out")
        except ValueError as e:
            p.error(str(e))
    args.case = list(dict.fromkeys(args.case or CASES))
    args.cases = [CASES[c] for c in args.case]
    return args
