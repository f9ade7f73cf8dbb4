"""``main`` of ``benchmarks/ledger_audit.py``: record the tasks (or take RUN_DIRs), audit them,
run the tamper study; write ``results.json`` and print the tables."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.ledger_study.audit_speed import audit_throughput
from benchmarks.ledger_study.cli import parse_args
from benchmarks.ledger_study.lockstep import stuck_arms
from benchmarks.ledger_study.tamper_study import print_table, tamper_study
from benchmarks.ledger_study.tasks import disk_needed, record
from ledger.errors import LedgerError
from simulator.run.appendlog import is_disk_full
from simulator.run.runlock import writable_file
from simulator.run.stop import sigterm_raises, stopped


def main(argv: list[str] | None = None) -> int:
    """Run the study (or audit RUN_DIRs); exit code 0, 1 when an audit of a clean run found
    something or a tamper case was missed, 2 on bad input (a one-line error)."""
    args = parse_args(argv)
    try:  # where the results go, checked before the study (it may take an hour)
        writable_file(args.out / "results.json", "--out")
        if args.json:
            writable_file(args.json, "--json")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    result: dict[str, Any] = {"tasks": [], "tamper": [], "cores": os.cpu_count()}
    result["pinning"] = _pin(args)
    try:
        with sigterm_raises():
            return _study(args, result, t0)
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: the arms' runs have ended
        what, code = stopped(e)
        print(
            f"{what}: the study stopped; the runs it made so far are under {args.out} "
            "(a study does not resume: run it again)",
            file=sys.stderr,
            flush=True,
        )
        if stuck_arms():  # a run waiting on a Ray the signal killed: end here, at once
            sys.stdout.flush()
            os._exit(code)
        return code
    except (OSError, LedgerError) as e:  # a full disk, or a node that went away mid-study
        if isinstance(e, OSError) and not is_disk_full(e):
            raise
        what = (
            f"no space left on the disk of {e.filename}"
            if isinstance(e, OSError)
            else f"ledger: {str(e).splitlines()[0]}"
        )
        print(
            f"error: {what}; the study stopped; the runs it made so far are under {args.out} "
            "(a study does not resume: run it again)",
            file=sys.stderr,
            flush=True,
        )
        return 1


def _study(args: Any, result: dict[str, Any], t0: float) -> int:
    """Record the tasks (or take RUN_DIRs), audit them, run the tamper study; write
    ``results.json`` and print the tables. Returns the exit code."""
    from ledger.audit_find import find_runs
    from ledger.audit_input import AuditInputError

    try:
        if args.run_dirs:
            dirs = [str(d) for d in find_runs(args.run_dirs)]
            result["audit"] = audit_throughput(dirs, args.jobs)
        else:
            _check_disk(args)
            result["recorder_start_s"] = _start_recorder()
            for task in args.tasks:
                rec = record(task, args)
                with _unpinned(result["pinning"]):  # the audit's processes use every core
                    thr = audit_throughput([r["run_dir"] for r in rec["runs"]], args.jobs)
                rec.update(audit_rounds_per_s=thr["rounds_per_s"], audit=thr)
                result["tasks"].append(rec)
            if args.tamper and args.tasks:
                first = result["tasks"][0]["runs"]
                other = first[1]["run_dir"] if len(first) > 1 else None
                result["tamper"] = tamper_study(
                    Path(first[0]["run_dir"]),
                    args.out,
                    Path(other) if other else None,
                    args.progress,
                )
    except (AuditInputError, ValueError) as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    result["seconds"] = time.perf_counter() - t0
    text = json.dumps(result, indent=1, default=str)
    (args.out / "results.json").write_text(text)
    if args.json:
        args.json.write_text(text)
    report(result)
    bad = [t for t in result["tasks"] if not t["audit"]["clean"]]
    bad += [c for c in result["tamper"] if c["caught"] not in (True, None)]
    if "audit" in result:
        bad += [] if result["audit"]["clean"] else [result["audit"]]
    return 1 if bad else 0


def _check_disk(args: Any) -> None:
    """Refuse, before the first run, a study whose round packs cannot fit under ``--out``
    (each run checks its own packs, but only when it starts: a study may be hours in)."""
    need, replaced = disk_needed(args)
    free = shutil.disk_usage(args.out).free
    if need > free + replaced:
        gb = 1e9
        earlier = (
            f" (+{replaced / gb:.2f} GB of earlier runs there it replaces)" if replaced else ""
        )
        raise ValueError(
            f"--out {args.out}: the study's ledger runs write ~{need / gb:.2f} GB of round "
            f"packs; {free / gb:.2f} GB is free{earlier}; free disk, choose another --out, or "
            "lower --seeds, --repeats or --rounds"
        )


def _pin(args: Any) -> dict[str, Any] | None:
    """Pin this process (``--driver-cpus``; the Ray actors and threads it starts inherit it)
    and name the recorder's CPUs (``--recorder-cpus``) before anything starts."""
    if args.driver_cpus_set is None and args.recorder_cpus_set is None:
        return None
    if args.recorder_cpus_set is not None:
        from ledger.host import CPUS_ENV

        os.environ[CPUS_ENV] = args.recorder_cpus
    if args.driver_cpus_set is not None:
        import torch

        os.sched_setaffinity(0, args.driver_cpus_set)
        torch.set_num_threads(len(args.driver_cpus_set))
    return {
        "driver_cpus": sorted(args.driver_cpus_set or os.sched_getaffinity(0)),
        "recorder_cpus": sorted(args.recorder_cpus_set) if args.recorder_cpus_set else None,
    }


@contextlib.contextmanager
def _unpinned(pinning: dict[str, Any] | None) -> Iterator[None]:
    """This process on every CPU inside the block (its children inherit it), pinned again
    after it."""
    if not pinning:
        yield
        return
    os.sched_setaffinity(0, range(os.cpu_count() or 1))
    try:
        yield
    finally:
        os.sched_setaffinity(0, pinning["driver_cpus"])


def _start_recorder() -> float:
    from ledger.host import prestart

    t0 = time.perf_counter()
    prestart().wait_ready()
    return time.perf_counter() - t0


def _pairing(interleave: str, reps: int) -> str:
    """How a task's arms alternated, for its table's title."""
    if interleave == "rounds":
        return (
            f"; each seed: the median of {reps} repetition(s), the arms taking turns a round at a "
            "time in one process (times exclude the waits)"
        )
    return f"; each seed: the median of {reps} back-to-back pairs" if reps > 1 else ""


def _secs(x: float | None, width: int) -> str:
    """Seconds in ``width`` columns; ``-`` for none."""
    return f"{x:{width}.2f}" if x is not None else "-".rjust(width)


def report(result: dict[str, Any]) -> None:
    """Print the tables."""
    if result.get("pinning"):
        pin = result["pinning"]
        print(
            f"pinned: driver and actors on CPUs {pin['driver_cpus']}, recorder on "
            f"{pin['recorder_cpus'] or 'any'}"
        )
    if "recorder_start_s" in result:
        print(
            f"recorder process start (once per driver process, not in the run times): "
            f"{result['recorder_start_s']:.2f} s"
        )
    for t in result["tasks"]:
        reps = t.get("repeats", 1)
        print(
            f"\n{t['task']}: {t['population']} devices, {t['clients_per_round']} a round, "
            f"{t['rounds']} rounds" + _pairing(t.get("interleave", "runs"), reps)
        )
        split = t.get("row_path_overhead") is not None
        busy = any(r.get("recorder_busy_s") is not None for r in t["runs"])
        print(
            "seed  plain s  ledger s  overhead  lag  waited s"
            + ("  recorder busy s" if busy else "")
            + "  cpu s  gas/round  same acc"
            + ("  rows s  row path" if split else "")
        )
        for r in t["runs"]:
            print(
                f"{r['seed']:>4}  {r['plain_seconds']:7.2f}  {r['ledger_seconds']:8.2f}  "
                f"{100 * r['overhead']:+7.1f}%  {r['recorder_lag_max']:>3}  "
                f"{_secs(r.get('driver_waited_s'), 8)}  "
                + (f"{_secs(r['recorder_busy_s'], 15)}  " if busy else "")
                + f"{r.get('recorder_cpu_s') or 0:5.2f}  "
                f"{r['gas_per_round'] or 0:9.0f}  "
                f"{str(r['same_accuracy']):>8}"
                + (
                    f"  {r['rows_seconds']:6.2f}  {100 * r['row_path_overhead']:+7.1f}%"
                    if split
                    else ""
                )
            )
        if split:
            print(
                f"row path alone (no ledger, rows instead of the actors' partial sums): median "
                f"{100 * t['row_path_overhead']:+.1f}%"
            )
        if t.get("recorder_cpu_share") is not None:
            print(
                f"recorder CPU: {100 * t['recorder_cpu_share']:.1f}% of the machine's "
                f"{t['cores']} cores over the plain run (median); on cores that training "
                "fills, that much CPU is the least the recorder can cost"
            )
        a = t["audit"]
        if t.get("overhead_ci90"):
            lo, hi = t["overhead_ci90"]
            print(
                f"90% bootstrap interval of the median overhead: {100 * lo:+.1f}% .. "
                f"{100 * hi:+.1f}% ({len(t['runs'])} seeds x {t.get('repeats', 1)} pairs; "
                "how far this machine's drift moves it)"
            )
        print(
            f"median overhead {100 * t['overhead']:+.1f}%, recorder at most "
            f"{t['recorder_lag_max']} rounds behind; audit {a['rounds_per_s']:.1f} rounds/s "
            f"({a['jobs']} processes on {a['cores']} cores), "
            f"{'all clean' if a['clean'] else 'FINDINGS on a clean run'}"
        )
    if "audit" in result:
        a = result["audit"]
        print(
            f"audited {a['runs']} runs, {a['rounds']} rounds: {a['rounds_per_s']:.1f} "
            f"rounds/s ({a['jobs']} processes on {a['cores']} cores), "
            f"{'all clean' if a['clean'] else 'FINDINGS'}"
        )
        for rep in a["audits"]:
            for line in rep["findings"]:
                print(f"  {rep['run_dir']}: {line}")
    if result["tamper"]:
        print_table(result["tamper"])
