"""Population scale: start-up, round time, engine overhead and memory from 10^4 to 10^6 devices.

Each run is a full ``run_experiment`` (Ray actors, event log) on virtual clients drawn from
scikit-learn digits with the MLP, in a fresh child process so that its memory is its own. The
parent samples the resident memory of the child and of every process it started (the Ray services
and actors) from ``/proc`` every 0.1 s. Reported per run:

* ``startup_s``: process start to the first round's plan (imports, data, population, Ray, actors);
* ``round_s``: mean wall time of a round (all rounds, event log included);
* ``overhead_share``: (round wall time - the slowest worker's training time) / round wall time,
  averaged over rounds: everything that is not training (selection, clock, placement, transfers,
  state store, aggregation, evaluation, records);
* ``driver_peak_rss_gb`` (the child's own peak, ``ru_maxrss``) and ``total_peak_rss_gb`` (the
  largest sum over the child's process tree seen by the sampler);
* ``state_mem_mb`` / ``state_disk_mb``: the client-state store at the end of the run.

Usage::

    python benchmarks/scale.py --json s.json
    python benchmarks/scale.py --populations 10000 100000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

T0 = time.perf_counter()
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.proc_memory import tree_rss  # noqa: E402

POPULATIONS = (10_000, 100_000, 1_000_000)


# ------------------------------------------------------------------------------ child side


class RoundClock:
    """Round callback: when each round's plan starts and when each round ends."""

    def __init__(self) -> None:
        self.plans: list[float] = []
        self.ends: list[float] = []
        self.train: list[float] = []

    def on_plan(self, sim: Any, plan: Any) -> None:
        self.plans.append(time.perf_counter())

    def on_round_end(self, sim: Any, record: Any) -> None:
        self.ends.append(time.perf_counter())
        self.train.append(float(record.extra["slowest_train_seconds"]))


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One run (in this process); returns its figures."""
    import resource

    from simulator.config.sections import build_config
    from simulator.run.experiment import run_experiment

    cfg = build_config(flat=spec["flat"])
    clock = RoundClock()
    summary = run_experiment(cfg, callbacks=[clock], progress=False)
    starts = [clock.plans[0]] + clock.ends[:-1]
    walls = [e - s for s, e in zip(starts, clock.ends, strict=True)]
    shares = [(w - t) / w for w, t in zip(walls, clock.train, strict=True)]
    st = summary["state_store"]
    return {
        "startup_s": clock.plans[0] - T0,
        "round_s": sum(walls) / len(walls),
        "round_walls": walls,
        "train_s": clock.train,
        "overhead_share": sum(shares) / len(shares),
        "driver_peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
        "state_mem_mb": st["memory_bytes"] / 1e6,
        "state_disk_mb": st["disk_bytes"] / 1e6,
        "final_accuracy": summary["final_accuracy"],
    }


# ----------------------------------------------------------------------------- parent side


class RunFailed(Exception):
    """A run's child process failed or went past ``--timeout`` (the message says which)."""


def run_one(flat: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run one configuration in a child process while sampling its tree's memory.

    Raises
    ------
    RunFailed
        The child failed, or went past ``timeout`` seconds (it is then ended with its
        session); stopped (Ctrl-C, SIGTERM), the child is ended too.
    """
    from benchmarks.stops import end_session

    what = f"the run of population {flat['num_clients']:,} ({flat['algorithm']})"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps({"flat": flat})]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        start_new_session=True,
    )
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], tree_rss(proc.pid))
            stop.wait(0.1)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RunFailed(f"{what} went past --timeout {timeout:g} s: it was stopped") from None
    finally:
        stop.set()
        th.join()
        end_session(proc)  # timed out or stopped: a child in a session of its own stays else
    if proc.returncode != 0:
        last = (err or out).strip().splitlines()[-1:] or ["no output"]
        raise RunFailed(f"{what} failed (exit {proc.returncode}): {last[0]}")
    res = json.loads(out.strip().splitlines()[-1])
    res["total_peak_rss_gb"] = peak[0] / 1e9
    return res


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """One-line errors (exit 2) before the first run: counts below 1, a timeout that is not a
    finite number > 0, an unknown state algorithm, a run that will not fit in memory (its
    estimate, :func:`simulator.run.budget.check_budget`), a ``--json`` that cannot be written."""
    from benchmarks.throughput_study.checks import outputs
    from simulator.algorithms import ALGORITHMS
    from simulator.config.sections import build_config
    from simulator.run.budget import check_budget

    for flag in ("populations", "clients_per_round", "rounds", "local_epochs"):
        value = min(getattr(args, flag)) if flag == "populations" else getattr(args, flag)
        if value < 1:
            p.error(f"--{flag.replace('_', '-')}: must be >= 1, got {value}")
    if not 0 < args.timeout < float("inf"):
        p.error(f"--timeout: must be a finite number of seconds > 0, got {args.timeout}")
    if args.state_algorithm and args.state_algorithm not in ALGORITHMS:
        p.error(f"--state-algorithm: unknown {args.state_algorithm!r}; valid: {ALGORITHMS.names()}")
    for n, algo, flat in plan(args):  # every run's config and memory, before the first run
        try:
            check_budget(build_config(flat={**flat, "out": tempfile.gettempdir()}))
        except ValueError as e:  # a ConfigError
            p.error(f"the run of population {n:,} ({algo}): {str(e).splitlines()[0]}")
    outputs(p, {"--json": args.json})


def plan(args: argparse.Namespace) -> list[tuple[int, str, dict[str, Any]]]:
    """The runs: ``(population, algorithm, flat config less its out)``, each population with
    FedAvg, then the largest with ``--state-algorithm`` (its state spilling beyond
    ``--state-memory``)."""
    base = settings(args)
    runs = [(n, "fedavg", {}) for n in args.populations]
    if args.state_algorithm:
        runs.append(
            (max(args.populations), args.state_algorithm, {"state_memory": args.state_memory})
        )
    return [(n, a, {**base, "num_clients": n, "algorithm": a, **x}) for n, a, x in runs]


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """What every run shares."""
    return {
        "dataset": "digits",
        "model": "mlp",
        "partition": "virtual",
        "clients_per_round": args.clients_per_round,
        "rounds": args.rounds,
        "local_epochs": args.local_epochs,
        "seed": args.seed,
        "num_actors": args.actors,
        "progress": False,
        "plots": False,
    }


def main(argv: list[str] | None = None) -> int:
    from benchmarks.throughput_study import checks
    from simulator.cli import OneLineParser

    p = OneLineParser(
        description="Start-up, round time, engine overhead and memory of "
        "FedSentry runs of 10^4-10^6 virtual clients (digits, MLP), "
        "each in a fresh process.",
        formatter_class=checks.DefaultsHelp,
    )
    p.add_argument(
        "--populations",
        type=int,
        nargs="+",
        default=list(POPULATIONS),
        help="population sizes (devices = virtual clients)",
    )
    p.add_argument("--clients-per-round", type=int, default=1000, help="cohort size")
    p.add_argument("--rounds", type=int, default=5, help="rounds per run")
    p.add_argument("--local-epochs", type=int, default=1, help="local epochs E")
    p.add_argument(
        "--state-algorithm",
        default="feddyn",
        help="algorithm of the extra run with per-client state at the largest "
        "population ('' to skip)",
    )
    p.add_argument(
        "--state-memory",
        default="64MB",
        help="client-state store budget of that run (it must spill beyond it)",
    )
    p.add_argument("--actors", type=int, default=0, help="Ray actors (0 = one per CPU)")
    p.add_argument("--seed", type=int, default=0, help="seed of every run")
    p.add_argument(
        "--timeout",
        type=float,
        default=1800.0,
        help="seconds allowed per run; a run past it is stopped (its process and its Ray), "
        "and so is the benchmark: one line, exit 1, no --json",
    )
    p.add_argument("--json", metavar="FILE", help="write {'runs': [...]} as JSON")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:  # ended by its parent when stopped (its whole session, Ray included)
        print(json.dumps(child(json.loads(args.child))))
        return 0
    check_args(p, args)
    from benchmarks.stops import run_stoppable

    return run_stoppable("scale", lambda: _runs(args))


def _runs(args: argparse.Namespace) -> int:
    """Every run, each in a child process; print the table; write ``--json`` (whole). Returns
    the exit code (1, with one line, when a run fails or goes past ``--timeout``)."""
    from tqdm import tqdm

    from benchmarks.stops import write_text, written

    runs = []
    bar = tqdm(plan(args), desc="runs", unit="run")
    try:
        with tempfile.TemporaryDirectory(prefix="fedsentry-scale-") as tmp:
            for n, algo, flat in bar:
                flat = {**flat, "out": str(Path(tmp) / f"{algo}-{n}")}
                res = run_one(flat, args.timeout)
                runs.append({"population": n, "algorithm": algo, **res})
    except RunFailed as e:
        bar.close()
        print(f"error: scale: {e}; the benchmark ends here, {written()}", file=sys.stderr)
        return 1
    finally:
        bar.close()  # before a stopped benchmark's line
    print(
        f"{'population':>10} {'algorithm':>9} {'startup s':>9} {'round s':>8} "
        f"{'overhead':>8} {'driver GB':>9} {'total GB':>8} {'state MB':>8} {'disk MB':>8}"
    )
    for r in runs:
        print(
            f"{r['population']:>10,} {r['algorithm']:>9} {r['startup_s']:>9.1f} "
            f"{r['round_s']:>8.2f} {r['overhead_share']:>8.1%} "
            f"{r['driver_peak_rss_gb']:>9.2f} {r['total_peak_rss_gb']:>8.2f} "
            f"{r['state_mem_mb']:>8.1f} {r['state_disk_mb']:>8.1f}"
        )
    if args.json:
        write_text(args.json, json.dumps({"runs": runs, "settings": settings(args)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
