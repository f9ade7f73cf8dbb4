"""Command line of ``benchmarks/ledger_audit.py`` (every flag explained in ``--help``)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from benchmarks.ledger_study.tasks import TASKS
from simulator.cli import OneLineParser, parse_kv


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The checked command line (one-line errors, exit 2)."""
    p = OneLineParser(
        prog="python benchmarks/ledger_audit.py",
        description="Ledger study: what FLChain recording costs a run, how fast "
        "the audit is, what it catches.",
    )
    p.add_argument(
        "run_dirs",
        nargs="*",
        metavar="RUN_DIR",
        help="recorded runs to audit (default: record the tasks' runs)",
    )
    p.add_argument(
        "--tasks",
        nargs="+",
        default=list(TASKS),
        choices=list(TASKS),
        help="tasks to measure (default: all)",
    )
    p.add_argument(
        "--seeds",
        type=int,
        default=None,
        help=(
            "seeds per task (default: 6 robustness, whose 2-3 s runs move by up to 20%% from run "
            "to run, 2 crossdevice)"
        ),
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=None,
        help=(
            "times each seed's arms run (in turn, the order alternating from one repetition to "
            "the next); a seed's overhead is the median of its repetitions' ratios (default 3: "
            "this machine's speed drifts)"
        ),
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="rounds per run (default: 30 robustness, 10 crossdevice)",
    )
    p.add_argument(
        "--population",
        type=int,
        default=None,
        help="crossdevice only (refused without it in --tasks): devices, >= 1 (default 10^6)",
    )
    p.add_argument(
        "--clients-per-round",
        type=int,
        default=None,
        help="crossdevice only (refused without it in --tasks): clients a round, >= 1 "
        "(default 1000)",
    )
    p.add_argument(
        "--committee",
        type=int,
        default=4,
        help="BLS edge validators attesting each round (default 4; 0 = none)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="audit processes (default: one per core)",
    )
    p.add_argument(
        "--ledger-url",
        default=None,
        help="record on this JSON-RPC node instead (asked its chain id before any work)",
    )
    p.add_argument(
        "--set",
        type=parse_kv,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="extra flat config override for every run (repeatable)",
    )
    p.add_argument(
        "--tamper",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="apply every tamper case to the first run the study records and audit it "
        "(default on when the study records runs; refused with RUN_DIRs, which are only "
        "audited: their copies would be the cases' own)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="smaller study: 2 seeds, 10^5 devices with 100 a round, 10 rounds",
    )
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument(
        "--out",
        type=Path,
        default=Path("runs/ledger-audit"),
        help="output directory (default runs/ledger-audit)",
    )
    p.add_argument(
        "--recorder-cpus",
        default=None,
        metavar="CPUS",
        help="pin the ledger's recorder process to these CPUs (e.g. 1, 2-3; sets "
        "FEDSENTRY_RECORDER_CPUS); with --driver-cpus on other CPUs this measures the "
        "overhead where a core is free for the recorder",
    )
    p.add_argument(
        "--driver-cpus",
        default=None,
        metavar="CPUS",
        help="pin this process, and so the Ray actors and torch threads it starts, to these "
        "CPUs; the crossdevice task then runs one actor per CPU named (both arms alike)",
    )
    p.add_argument(
        "--split-row-path",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="crossdevice: also run each seed without the ledger and without the actors' "
        "partial sums (preaggregate=false, as the ledger runs), splitting the overhead into "
        "the row path and the recorder (default on)",
    )
    p.add_argument(
        "--interleave",
        choices=("runs", "rounds"),
        default="rounds",
        help="how a seed's arms alternate: 'rounds' (default), in one process taking turns a "
        "round at a time, so that this machine's drift, which moves in steps lasting seconds, "
        "falls on every arm alike (the recorder runs only in the ledger arm's turns, each arm "
        "trains with its own torch threads); 'runs', whole runs back to back",
    )
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    args = p.parse_args(argv)
    from ledger.host_process import parse_cpus

    for flag in ("recorder_cpus", "driver_cpus"):
        text = getattr(args, flag)
        try:
            setattr(args, flag + "_set", parse_cpus(text) if text is not None else None)
        except ValueError as exc:
            p.error(f"--{flag.replace('_', '-')}: {exc}")
    if (args.seeds is not None and args.seeds < 1) or (args.rounds is not None and args.rounds < 3):
        p.error("--seeds must be >= 1 and --rounds >= 3 (the tamper study needs 3 rounds)")
    if args.repeats is not None and args.repeats < 1:
        p.error(f"--repeats must be >= 1, got {args.repeats}")
    if args.committee < 0 or args.jobs < 1:
        p.error("--committee must be >= 0 and --jobs >= 1")
    _check_crossdevice(p, args)
    if args.run_dirs and args.tamper:  # until now skipped without a word
        p.error(
            "--tamper applies to the runs the study records; RUN_DIRs are only audited "
            "(leave out --tamper, or record with --tasks)"
        )
    args.tamper = args.tamper is not False and not args.run_dirs
    if args.ledger_url is not None:  # no node there is bad input, found before the first run
        from ledger.errors import LedgerError
        from ledger.node_probe import probe_node

        try:
            probe_node(args.ledger_url, None)
        except (LedgerError, ValueError) as exc:  # ValueError: not a URL urllib reads
            p.error(f"--ledger-url: {exc}")
    return args


def _check_crossdevice(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse ``--population`` and ``--clients-per-round`` below 1 (0 once meant the default),
    or given without the crossdevice task (no other task reads them)."""
    given = [
        (flag, v)
        for flag, v in (
            ("--population", args.population),
            ("--clients-per-round", args.clients_per_round),
        )
        if v is not None
    ]
    for flag, v in given:
        if v < 1:
            p.error(f"{flag} must be >= 1, got {v}")
    if given and "crossdevice" not in args.tasks:
        p.error(
            f"{given[0][0]} applies to the crossdevice task only; --tasks "
            f"{' '.join(args.tasks)} does not use it"
        )
