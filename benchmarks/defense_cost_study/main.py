"""The command line of ``benchmarks/defense_cost.py``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

from benchmarks.defense_cost_study.core import HEAD, model_sizes, run_case
from benchmarks.defense_cost_study.references import load_byzfl
from benchmarks.stops import run_stoppable, write_text
from defenses import DEFENSES
from simulator.cli import OneLineParser
from simulator.run.runlock import writable_file


def parse_args(argv: list[str] | None) -> Any:
    p = OneLineParser(
        prog="python benchmarks/defense_cost.py",
        description="Aggregation time of every registered defense at n rows and "
        "the MLP's / CNN's parameter count (mnist5k), against the "
        "reference (exact) code and ByzFL, with agreement checks.",
    )
    p.add_argument(
        "--sizes", default=None, metavar="N,N", help="row counts (default 100,1000; --quick: 100)"
    )
    p.add_argument(
        "--dims",
        default=None,
        metavar="D,D",
        help="row lengths instead of the models' sizes (named d<D> in the table)",
    )
    p.add_argument(
        "--defenses",
        default=None,
        metavar="NAME,NAME",
        help=f"defenses to time (default all: {','.join(sorted(DEFENSES))})",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="interleaved timing turns per case (default 3; --quick: 1)",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=30.0,
        help="time the exact distances in full only below this many seconds, else "
        "on a subset of rows, extrapolated (default 30)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic rows (default 0)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="one turn, n=100 only (unless --sizes), for a smoke run",
    )
    p.add_argument("--no-byzfl", action="store_true", help="skip the ByzFL comparison")
    p.add_argument("--json", metavar="FILE", help="also write every figure to FILE as JSON")
    a = p.parse_args(argv)
    try:
        a.sizes = [int(s) for s in (a.sizes or ("100" if a.quick else "100,1000")).split(",")]
        a.dims = None if a.dims is None else [int(s) for s in a.dims.split(",")]
    except ValueError:
        p.error("--sizes/--dims: expected comma-separated integers")
    if min(a.sizes) < 3 or (a.dims is not None and min(a.dims) < 1):
        p.error("--sizes must be >= 3 and --dims >= 1")
    a.defenses = sorted(DEFENSES) if a.defenses is None else a.defenses.split(",")
    unknown = sorted(set(a.defenses) - set(DEFENSES))
    if unknown:
        p.error(f"--defenses: unknown {unknown[0]!r}; valid: {sorted(DEFENSES)}")
    a.repeats = a.repeats if a.repeats is not None else (1 if a.quick else 3)
    if a.repeats < 1 or not a.budget_s > 0:
        p.error("--repeats must be >= 1 and --budget-s > 0")
    if a.json:  # checked before the timings (minutes)
        try:
            writable_file(Path(a.json), "--json")
        except ValueError as e:
            p.error(str(e))
    return a


def main(argv: list[str] | None = None) -> int:
    """Time every case; print the table as it goes; write ``--json`` (whole). Returns the exit
    code (2 on bad input, 130 / 143 when stopped, with one line)."""
    args = parse_args(argv)
    return run_stoppable("defense_cost", lambda: _time_cases(args, argv))


def _time_cases(args: Any, argv: list[str] | None) -> int:
    """The table's header, one line per case as it is timed, then ``--json``."""
    dims = {f"d{d}": d for d in args.dims} if args.dims else model_sizes()
    byz = None if args.no_byzfl else load_byzfl()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, device "
        f"{'cuda' if torch.cuda.is_available() else 'cpu'}; byzfl "
        f"{'loaded' if byz is not None else 'not available'}; * = extrapolated reference",
        flush=True,
    )
    print(HEAD, flush=True)
    rows = [
        r for n in args.sizes for model, d in dims.items() for r in run_case(n, model, d, args, byz)
    ]
    if args.json:
        write_text(args.json, json.dumps({"rows": rows, "argv": argv or sys.argv[1:]}, indent=1))
    return 0
