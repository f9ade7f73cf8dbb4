"""The command line of ``benchmarks/throughput.py``."""

from __future__ import annotations

import argparse
import json
import sys

import torch

from benchmarks.stops import run_stoppable, whole, write_text
from benchmarks.throughput_study import checks
from benchmarks.throughput_study.core import measure_task
from benchmarks.throughput_study.report import plot, print_table
from benchmarks.throughput_study.tasks import TASKS, Task
from simulator.cli import OneLineParser


def build_parser() -> argparse.ArgumentParser:
    """The command line (every flag explained in ``--help``)."""
    p = OneLineParser(
        description="Client-update throughput of FedSentry vs Flower vs the fused reference "
        "(the faster of one process x all threads and one process per core) on "
        "identical tasks (E=1, B=10, lr=0.05; 100 clients, or 100,000 virtual "
        "clients with 1,000 a round).",
        formatter_class=checks.DefaultsHelp,
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="fewer timed rounds (finishes in a few minutes on 2 cores)",
    )
    p.add_argument(
        "--tasks",
        nargs="*",
        default=[t.name for t in TASKS],
        help=f"subset of tasks: {[t.name for t in TASKS]}",
    )
    p.add_argument(
        "--flower-rounds-large",
        type=int,
        default=None,
        help="timed Flower rounds on the 1,000-a-round virtual task (default 2; "
        "quick: 1; no warm-up round): a Flower round there takes minutes",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="timed rounds for FedSentry and fused (default 30; quick: 10)",
    )
    p.add_argument(
        "--min-seconds",
        type=float,
        default=None,
        help="FedSentry and fused: keep timing rounds until this much wall time "
        "has passed (default 5; quick: 2)",
    )
    p.add_argument(
        "--flower-rounds", type=int, default=None, help="timed Flower rounds (default 5; quick: 2)"
    )
    p.add_argument(
        "--flower-cpus",
        type=float,
        nargs="*",
        default=[1.0, 2.0],
        help="Flower client CPU settings to try; the fastest is reported",
    )
    p.add_argument(
        "--flower-gpus",
        type=float,
        nargs="*",
        default=None,
        help="Flower GPU shares per client to try as well (each client then trains on CUDA "
        "with 1 CPU); default: 0.125 on a machine with CUDA, none without",
    )
    p.add_argument("--no-flower", action="store_true", help="skip the Flower peer")
    p.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="measurements of FedSentry and fused (each timed round by round in "
        "turns); each system's best is reported (default 3; quick: 2)",
    )
    p.add_argument(
        "--actors", type=int, default=0, help="FedSentry device actors (0 = one per CPU)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of partition and sampling")
    p.add_argument("--json", metavar="FILE", help="write results as JSON")
    p.add_argument("--plot", metavar="PNG", help="write a bar chart of updates/s per task")
    return p


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """One-line errors (exit 2) on bad input, before any work: counts below 1, a config the
    tasks cannot build (``--actors``, ``--seed``)."""
    checks.at_least_one(p, args, ["rounds", "repeats", "flower_rounds", "flower_rounds_large"])
    bad_cpus = [c for c in args.flower_cpus if not 1 <= c < float("inf")]
    if bad_cpus:
        p.error(f"--flower-cpus: must be >= 1, got {bad_cpus[0]:g}")
    if not args.flower_cpus and not args.no_flower:
        p.error("--flower-cpus: give at least one setting (or --no-flower)")
    checks.seed_and_actors(p, args.seed, args.actors)


def main(argv: list[str] | None = None) -> int:
    """Measure the tasks; print the table; write ``--json`` / ``--plot``. Returns the exit
    code (2 on bad input, with a one-line error)."""
    p = build_parser()
    args = p.parse_args(argv)
    known = {t.name: t for t in TASKS}
    bad = [t for t in args.tasks if t not in known]
    if bad:
        print(f"error: unknown task {bad[0]!r}; valid: {list(known)}", file=sys.stderr)
        return 2
    check_args(p, args)
    rounds = args.rounds if args.rounds is not None else (10 if args.quick else 30)
    frounds = args.flower_rounds if args.flower_rounds is not None else (2 if args.quick else 5)
    min_s = args.min_seconds if args.min_seconds is not None else (2.0 if args.quick else 5.0)
    repeats = args.repeats if args.repeats is not None else (2 if args.quick else 3)
    if not 0 <= min_s < float("inf"):
        print(f"error: --min-seconds must be a finite number >= 0; got {min_s}", file=sys.stderr)
        return 2
    if args.flower_gpus is None:
        args.flower_gpus = [0.125] if torch.cuda.is_available() else []
    bad_gpu = [g for g in args.flower_gpus if not 0 < g <= 1]
    if bad_gpu:
        print(f"error: --flower-gpus: {bad_gpu[0]:g} is not a share in (0, 1]", file=sys.stderr)
        return 2
    if args.flower_gpus and not torch.cuda.is_available():
        print("error: --flower-gpus needs a CUDA device; this machine has none", file=sys.stderr)
        return 2
    checks.outputs(p, {"--json": args.json, "--plot": args.plot})  # before minutes of work
    return run_stoppable(
        "throughput", lambda: _measure(args, known, rounds, frounds, min_s, repeats)
    )


def _measure(
    args: argparse.Namespace,
    known: dict[str, Task],
    rounds: int,
    frounds: int,
    min_s: float,
    repeats: int,
) -> int:
    """Measure the tasks; print the table; write ``--json`` / ``--plot`` (each whole)."""
    results = [
        measure_task(known[name], args, rounds, frounds, min_s, repeats) for name in args.tasks
    ]
    print_table(results)
    meta = {
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
        "cpus": torch.get_num_threads(),
    }
    if args.json:
        write_text(args.json, json.dumps({"tasks": results, "meta": meta}, indent=2))
    if args.plot:
        with whole(args.plot) as tmp:
            plot(results, tmp)
    return 0
