"""Ledger study: what FLChain recording costs a run, how fast the audit is, what it catches.

Without RUN_DIRs, for each task it records the same seeds with and without ``--ledger``,
interleaved (the order alternates from seed to seed, since this machine's speed drifts), and
reports the ledger's overhead on the run's time (its rounds and the ledger's final flush; the
median over seeds), how far the recorder ever fell behind, the audit's throughput, and, with
``--tamper``, a table of tamper cases applied to a recorded run at its first, middle and last
round, each of which the audit must report at its round and client.

Tasks: ``robustness`` (the robustness benchmark's default task: 10 IID digits clients, all of
them every round, E=5, MLP, 30 rounds; multikrum against 20% label flipping, so some rows are
rejected) and ``crossdevice`` (10^6 virtual digits clients, 1,000 a round, E=1, 10 rounds, on
the Ray actor pool). The recorder process is started before the timed runs (as a local Ray is);
its start-up is reported apart (``recorder_start_s``).

With RUN_DIRs it audits those runs only. Writes ``--json`` (and ``results.json`` into
``--out``) and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simulator.cli import OneLineParser, parse_kv  # noqa: E402

TASKS: dict[str, dict[str, Any]] = {
    "robustness": {"rounds": 30, "seeds": 3},
    "crossdevice": {"rounds": 10, "seeds": 2, "num_clients": 1_000_000,
                    "clients_per_round": 1000},
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(prog="python benchmarks/ledger_audit.py",
                      description=__doc__.split("\n")[0])
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR",
                   help="recorded runs to audit (default: record the tasks' runs)")
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS),
                   help="tasks to measure (default: all)")
    p.add_argument("--seeds", type=int, default=None,
                   help="seeds per task (default: 3 robustness, 2 crossdevice)")
    p.add_argument("--rounds", type=int, default=None,
                   help="rounds per run (default: 30 robustness, 10 crossdevice)")
    p.add_argument("--population", type=int, default=None,
                   help="crossdevice: devices (default 10^6)")
    p.add_argument("--clients-per-round", type=int, default=None,
                   help="crossdevice: clients a round (default 1000)")
    p.add_argument("--committee", type=int, default=4,
                   help="BLS edge validators attesting each round (default 4; 0 = none)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="audit processes (default: one per core)")
    p.add_argument("--ledger-url", default=None, help="record on this JSON-RPC node instead")
    p.add_argument("--set", type=parse_kv, action="append", default=[], metavar="KEY=VALUE",
                   dest="overrides", help="extra flat config override for every run (repeatable)")
    p.add_argument("--tamper", action=argparse.BooleanOptionalAction, default=True,
                   help="apply every tamper case to a recorded run and audit it (default on)")
    p.add_argument("--quick", action="store_true",
                   help="smaller study: 2 seeds, 10^5 devices with 100 a round, 10 rounds")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument("--out", type=Path, default=Path("runs/ledger-audit"),
                   help="output directory (default runs/ledger-audit)")
    p.add_argument("--no-progress", dest="progress", action="store_false",
                   help="no progress bars")
    args = p.parse_args(argv)
    if (args.seeds is not None and args.seeds < 1) or (args.rounds is not None
                                                         and args.rounds < 3):
        p.error("--seeds must be >= 1 and --rounds >= 3 (the tamper study needs 3 rounds)")
    if args.committee < 0 or args.jobs < 1:
        p.error("--committee must be >= 0 and --jobs >= 1")
    return args


def task_config(task: str, args: argparse.Namespace) -> dict[str, Any]:
    """The flat config of a task's runs (without seed, out and ledger)."""
    import benchmarks.robustness_grid as grid

    t = TASKS[task]
    rounds = args.rounds or (10 if args.quick else t["rounds"])
    if task == "robustness":
        flat = grid.resolve_scenario(grid.DEFAULT_SCENARIO, "digits", rounds, {})
        n = flat["clients_per_round"]
        flat.update(defense="multikrum", attack="labelflip", attack_fraction=0.2,
                    defense_params={"f": grid.byzantine_f(0.2, n)}, backend="local")
    else:
        flat = {"dataset": "digits", "partition": "virtual", "local_epochs": 1,
                "rounds": rounds,
                "num_clients": args.population or (100_000 if args.quick else t["num_clients"]),
                "clients_per_round": args.clients_per_round or (
                    100 if args.quick else t["clients_per_round"])}
    flat.update(progress=False, plots=False, committee=args.committee,
                ledger_url=args.ledger_url)
    flat.update(dict(args.overrides))
    return flat


def record(task: str, args: argparse.Namespace) -> dict[str, Any]:
    """Each seed without and with the ledger, interleaved; the task's figures."""
    from tqdm import tqdm

    from simulator.config.sections import build_config
    from simulator.run.experiment import run_experiment

    flat = task_config(task, args)
    seeds = args.seeds or (2 if args.quick else TASKS[task]["seeds"])
    runs = []
    for s in tqdm(range(seeds), desc=task, unit="seed", disable=not args.progress,
                  file=sys.stderr):
        times: dict[bool, float] = {}
        out: dict[bool, dict[str, Any]] = {}
        for led in ((False, True) if s % 2 == 0 else (True, False)):
            d = args.out / task / f"{'ledger' if led else 'plain'}-s{s}"
            res = run_experiment(build_config(flat={**flat, "seed": s, "out": str(d),
                                                    "ledger": led}))
            times[led], out[led] = res["run_seconds"], res
        lg = out[True]["ledger"]
        runs.append({"seed": s, "run_dir": out[True]["out"], "plain_seconds": times[False],
                     "ledger_seconds": times[True], "overhead": times[True] / times[False] - 1,
                     "recorder_lag_max": lg["recorder_lag_max"],
                     "recorder_busy_s": lg["recorder_seconds"],
                     "driver_waited_s": lg["ledger_seconds"],
                     "gas_per_round": lg["gas_per_round"],
                     "same_accuracy": out[True]["final_accuracy"] == out[False]["final_accuracy"]})
    return {"task": task, "clients_per_round": flat["clients_per_round"],
            "population": flat["num_clients"], "rounds": flat["rounds"], "runs": runs,
            "overhead": statistics.median(r["overhead"] for r in runs),
            "recorder_lag_max": max(r["recorder_lag_max"] for r in runs)}


def _warm(d: str) -> int:
    """Audit ``d`` once, untimed: a fresh process pays its imports, the dataset and py-evm's
    first block once (~1.5 s here), not per run."""
    _audit(d)
    time.sleep(0.3)  # so that every process takes one
    return os.getpid()


def _audit(d: str) -> dict[str, Any]:
    import torch

    from ledger.audit import audit_run

    torch.set_num_threads(1)
    rep = audit_run(d)
    return {"run_dir": d, "rounds": rep.rounds, "clean": rep.clean, "seconds": rep.seconds,
            "findings": [f.line() for f in rep.findings]}


def audit_throughput(dirs: list[str], jobs: int) -> dict[str, Any]:
    """Audit ``dirs`` on ``jobs`` started, warmed processes (one run each at a time); rounds a
    second of wall time (process start-up, imports and first-use costs excluded: each process
    audits one run untimed first)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
        list(pool.map(_warm, [dirs[0]] * jobs))
        t0 = time.perf_counter()
        reps = list(pool.map(_audit, dirs))
        wall = time.perf_counter() - t0
    rounds = sum(r["rounds"] for r in reps)
    return {"jobs": jobs, "cores": os.cpu_count(), "runs": len(reps), "rounds": rounds,
            "wall_s": wall, "rounds_per_s": rounds / wall, "audits": reps,
            "clean": all(r["clean"] for r in reps)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from ledger.audit import find_runs
    from ledger.audit_checks import AuditInputError

    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    result: dict[str, Any] = {"tasks": [], "tamper": [], "cores": os.cpu_count()}
    try:
        if args.run_dirs:
            dirs = [str(d) for d in find_runs(args.run_dirs)]
            result["audit"] = audit_throughput(dirs, args.jobs)
        else:
            result["recorder_start_s"] = _start_recorder()
            for task in args.tasks:
                rec = record(task, args)
                thr = audit_throughput([r["run_dir"] for r in rec["runs"]], args.jobs)
                rec.update(audit_rounds_per_s=thr["rounds_per_s"], audit=thr)
                result["tasks"].append(rec)
            if args.tamper and args.tasks:
                from benchmarks.ledger_tamper_study import tamper_study

                first = result["tasks"][0]["runs"]
                other = first[1]["run_dir"] if len(first) > 1 else None
                result["tamper"] = tamper_study(Path(first[0]["run_dir"]), args.out,
                                                Path(other) if other else None, args.progress)
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


def _start_recorder() -> float:
    from ledger.host import prestart

    t0 = time.perf_counter()
    prestart().wait_ready()
    return time.perf_counter() - t0


def report(result: dict[str, Any]) -> None:
    """Print the tables."""
    if "recorder_start_s" in result:
        print(f"recorder process start (once per driver process, not in the run times): "
              f"{result['recorder_start_s']:.2f} s")
    for t in result["tasks"]:
        print(f"\n{t['task']}: {t['population']} devices, {t['clients_per_round']} a round, "
              f"{t['rounds']} rounds")
        print("seed  plain s  ledger s  overhead  lag  recorder busy s  gas/round  same acc")
        for r in t["runs"]:
            print(f"{r['seed']:>4}  {r['plain_seconds']:7.2f}  {r['ledger_seconds']:8.2f}  "
                  f"{100 * r['overhead']:+7.1f}%  {r['recorder_lag_max']:>3}  "
                  f"{r['recorder_busy_s']:15.2f}  {r['gas_per_round'] or 0:9.0f}  "
                  f"{str(r['same_accuracy']):>8}")
        a = t["audit"]
        print(f"median overhead {100 * t['overhead']:+.1f}%, recorder at most "
              f"{t['recorder_lag_max']} rounds behind; audit {a['rounds_per_s']:.1f} rounds/s "
              f"({a['jobs']} processes on {a['cores']} cores), "
              f"{'all clean' if a['clean'] else 'FINDINGS on a clean run'}")
    if "audit" in result:
        a = result["audit"]
        print(f"audited {a['runs']} runs, {a['rounds']} rounds: {a['rounds_per_s']:.1f} "
              f"rounds/s ({a['jobs']} processes on {a['cores']} cores), "
              f"{'all clean' if a['clean'] else 'FINDINGS'}")
        for rep in a["audits"]:
            for line in rep["findings"]:
                print(f"  {rep['run_dir']}: {line}")
    if result["tamper"]:
        from benchmarks.ledger_tamper_study import print_table

        print_table(result["tamper"])


if __name__ == "__main__":
    sys.exit(main())
