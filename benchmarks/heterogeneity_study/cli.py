"""Command line of ``benchmarks/heterogeneity.py`` (every flag explained in ``--help``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.heterogeneity_study.cases import CASES
from simulator.cli import OneLineParser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The checked command line (one-line errors, exit 2); ``case``: the chosen case names
    (default: every registered case), ``cases``: their :class:`Case` objects."""
    p = OneLineParser(
        description="Reproduce the seed papers' heterogeneity claims: one case "
        "per claim, FedSentry runs per arm and seed, a verdict per "
        "comparison (reproduced when the method beats the baseline "
        "in the predicted direction by more than the larger of the "
        "two standard deviations over seeds)."
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
        help="each case's quick settings (fewer rounds/epochs; all cases in "
        "under 15 minutes on 2 cores) instead of its full ones",
    )
    p.add_argument(
        "--seeds", type=int, default=3, help="seeds per arm, 0..N-1 (default %(default)s)"
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
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--list",
        action="store_true",
        help="print each case's name, claim and comparisons, and exit",
    )
    args = p.parse_args(argv)
    unknown = [c for c in args.case or [] if c not in CASES]
    if unknown:
        p.error(f"unknown case {unknown[0]!r}; valid: {list(CASES)}")
    if args.seeds < 1 or args.workers < 1:
        p.error("--seeds and --workers must be >= 1")
    args.case = list(dict.fromkeys(args.case or CASES))
    args.cases = [CASES[c] for c in args.case]
    return args
