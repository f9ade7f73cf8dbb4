"""The ledger study's tasks and their runs: each seed recorded without and with the ledger,
interleaved (the order alternates from pair to pair, since this machine's speed drifts), and
``--repeats`` times: a seed's overhead is the median of the ratios within its repetitions.

``robustness`` is the robustness benchmark's default task (10 IID digits clients, all of them
every round, E=5, MLP, 30 rounds; multikrum against 20% label flipping, so some rows are
rejected); ``crossdevice`` 10^6 virtual digits clients, 1,000 a round, E=1, 10 rounds, on the Ray
actor pool. There each seed also runs a third time, without the ledger and without the
actors' partial sums (``preaggregate=false``: the ledger needs every row in the driver, so a
ledger run ships rows), which splits the overhead into that row path and the recorder.

With ``--interleave rounds`` (the default) a repetition's arms run in one process taking turns a
round at a time (:mod:`benchmarks.ledger_study.lockstep`), each timed less its waits, the recorder
running only in the ledger arm's turns; with ``--interleave runs`` whole runs alternate.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks.robustness_study import grid

TASKS: dict[str, dict[str, Any]] = {
    "robustness": {"rounds": 30, "seeds": 6, "repeats": 3},
    "crossdevice": {
        "rounds": 10,
        "seeds": 2,
        "repeats": 3,
        "num_clients": 1_000_000,
        "clients_per_round": 1000,
    },
}


def task_config(task: str, args: argparse.Namespace) -> dict[str, Any]:
    """The flat config of a task's runs (without seed, out and ledger)."""
    t = TASKS[task]
    rounds = args.rounds or (10 if args.quick else t["rounds"])
    if task == "robustness":
        flat = grid.resolve_scenario(grid.DEFAULT_SCENARIO, "digits", rounds, {})
        n = flat["clients_per_round"]
        flat.update(
            defense="multikrum",
            attack="labelflip",
            attack_fraction=0.2,
            defense_params={"f": grid.byzantine_f(0.2, n)},
            backend="local",
        )
    else:
        flat = {
            "dataset": "digits",
            "partition": "virtual",
            "local_epochs": 1,
            "rounds": rounds,
            "num_clients": _given(args.population, 100_000 if args.quick else t["num_clients"]),
            "clients_per_round": _given(
                args.clients_per_round, 100 if args.quick else t["clients_per_round"]
            ),
        }
    if getattr(args, "driver_cpus_set", None) and task == "crossdevice":
        flat["num_actors"] = len(args.driver_cpus_set)  # one actor per pinned CPU
    flat.update(progress=False, plots=False, committee=args.committee, ledger_url=args.ledger_url)
    flat.update(dict(args.overrides))
    return flat


def _given(value: int | None, default: int) -> int:
    """``value`` when the flag was given (0 included: the command line refuses it), else
    ``default``."""
    return default if value is None else value


def record(task: str, args: argparse.Namespace) -> dict[str, Any]:
    """Each seed without and with the ledger, interleaved (``--repeats`` times, the arms' order
    alternating); the task's figures."""
    from tqdm import tqdm

    flat = task_config(task, args)
    seeds = args.seeds or (2 if args.quick else TASKS[task]["seeds"])
    repeats = getattr(args, "repeats", None) or TASKS[task]["repeats"]
    # the ledger needs every row in the driver, so a linear rule's partial sums on the actors
    # are off with it: the "rows" arm (no ledger, no pre-aggregation) splits the overhead
    # into that row path and the recorder
    split = task == "crossdevice" and getattr(args, "split_row_path", True)
    arms = ["plain", "ledger"] + (["rows"] if split else [])
    rounds_mode = getattr(args, "interleave", "runs") == "rounds"
    if rounds_mode:
        from benchmarks.ledger_study.lockstep import ray_for_arms

        ray_for_arms(flat, len(arms))
    cores = os.cpu_count() or 1
    runs = []
    bar = tqdm(
        total=seeds * repeats, desc=task, unit="pair", disable=not args.progress, file=sys.stderr
    )
    for s in range(seeds):
        reps = []
        for rep in range(repeats):
            order = arms if (s + rep) % 2 == 0 else arms[::-1]
            reps.append(_repetition(args, task, flat, s, rep, order, rounds_mode))
            bar.update()
        runs.append(_seed_row(s, reps, split))
        if rounds_mode:  # its wall time there also spans the other arms' turns (it is stopped)
            runs[-1]["recorder_busy_s"] = None
    bar.close()
    return {
        "task": task,
        "clients_per_round": flat["clients_per_round"],
        "population": flat["num_clients"],
        "rounds": flat["rounds"],
        "repeats": repeats,
        "interleave": "rounds" if rounds_mode else "runs",
        "runs": runs,
        "overhead": statistics.median(r["overhead"] for r in runs),
        # how far this machine's drift moves that median: a bootstrap over seeds and pairs
        "overhead_ci90": list(interval([r["pair_overheads"] for r in runs])),
        "row_path_overhead": (
            statistics.median(r["row_path_overhead"] for r in runs) if split else None
        ),
        "recorder_lag_max": max(r["recorder_lag_max"] for r in runs),
        # the recorder's CPU seconds against the machine's core-seconds over the plain run
        "cores": cores,
        "recorder_cpu_share": statistics.median(
            (r["recorder_cpu_s"] or 0.0) / (cores * r["plain_seconds"]) for r in runs
        ),
    }


def disk_needed(args: argparse.Namespace) -> tuple[float, float]:
    """Bytes of disk the study's ledger runs will write under ``--out`` (their round packs,
    :func:`simulator.run.budget.ledger_disk`, plus one copy of the first run for the tamper
    study), and the bytes of earlier ledgers in those run directories, which the runs replace."""
    from simulator.run.budget import estimate

    need = replaced = 0.0
    for i, task in enumerate(args.tasks):
        flat = task_config(task, args)
        seeds = args.seeds or (2 if args.quick else TASKS[task]["seeds"])
        repeats = getattr(args, "repeats", None) or TASKS[task]["repeats"]
        per_run = estimate(_cfg(args, task, flat, 0, 0, "ledger")).ledger
        need += per_run * (seeds * repeats + (1 if i == 0 and args.tamper else 0))
        for s in range(seeds):
            for rep in range(repeats):
                d = _run_dir(args, task, s, rep, "ledger") / "ledger"
                if d.is_dir():
                    replaced += sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
    return need, replaced


def _cfg(
    args: argparse.Namespace, task: str, flat: dict[str, Any], seed: int, rep: int, arm: str
) -> Any:
    """The config of ``arm``'s run of ``seed`` in repetition ``rep``."""
    from simulator.config.sections import build_config

    d = _run_dir(args, task, seed, rep, arm)
    extra = {"preaggregate": False} if arm == "rows" else {}
    cfg = {**flat, **extra, "seed": seed, "out": str(d), "ledger": arm == "ledger"}
    return build_config(flat=cfg)


def _run_dir(args: argparse.Namespace, task: str, seed: int, rep: int, arm: str) -> Path:
    """The output directory of ``arm``'s run of ``seed`` in repetition ``rep``."""
    return args.out / task / (f"{arm}-s{seed}" + (f"-r{rep}" if rep else ""))


def _repetition(
    args: argparse.Namespace,
    task: str,
    flat: dict[str, Any],
    seed: int,
    rep: int,
    order: list,
    rounds: bool,
) -> dict[str, dict[str, Any]]:
    """One repetition of a seed; arm -> its run's summary. Whole runs one after another in
    ``order``, or (``rounds``) the arms taking turns a round at a time in one process
    (:mod:`benchmarks.ledger_study.lockstep`), ``run_seconds`` then each arm's own time: each
    arm trains with this process's torch threads, and the recorder runs only in the ledger
    arm's turns."""
    import torch

    from benchmarks.ledger_study.lockstep import Paused, run_interleaved
    from ledger.host import RecorderHost
    from simulator.run import experiment

    def job(arm: str) -> Any:
        cfg = _cfg(args, task, flat, seed, rep, arm)
        return lambda callbacks: experiment.run_experiment(cfg, callbacks=callbacks)

    jobs = {arm: job(arm) for arm in order}
    if not rounds:
        return {arm: jobs[arm]([]) for arm in order}
    own = dict.fromkeys(order, torch.get_num_threads())
    paused = {"ledger": Paused(RecorderHost.running_pid)}
    return run_interleaved(jobs, order, threads=own, paused=paused)


def _seed_row(seed: int, reps: list[dict[str, dict[str, Any]]], split: bool) -> dict[str, Any]:
    """A seed's figures from its repetitions: each overhead is the median over repetitions of
    the ratio within one (the arms of a repetition ran in turn), the times and the
    recorder's seconds are medians, the lag the largest; the first repetition's ledger run is
    the one audited."""
    med = statistics.median

    def secs(arm: str) -> list[float]:
        return [r[arm]["run_seconds"] for r in reps]

    def ledger(key: str) -> list[Any]:
        return [r["ledger"]["ledger"][key] for r in reps]

    def over(arm: str) -> float:  # the arm's median ratio to the plain run of its repetition
        return med(b / a - 1 for a, b in zip(plain, secs(arm), strict=True))

    plain, led = secs("plain"), secs("ledger")
    cpu = [c for c in ledger("recorder_cpu_seconds") if c is not None]
    pairs = [b / a - 1 for a, b in zip(plain, led, strict=True)]
    return {
        "seed": seed,
        "run_dir": reps[0]["ledger"]["out"],
        "plain_seconds": med(plain),
        "ledger_seconds": med(led),
        "rows_seconds": med(secs("rows")) if split else None,
        "overhead": med(pairs),
        "pair_overheads": pairs,
        "row_path_overhead": over("rows") if split else None,
        "recorder_lag_max": max(ledger("recorder_lag_max")),
        "recorder_busy_s": med(ledger("recorder_seconds")),
        "recorder_cpu_s": med(cpu) if cpu else None,
        "driver_waited_s": med(ledger("ledger_seconds")),
        "gas_per_round": reps[0]["ledger"]["ledger"]["gas_per_round"],
        "same_accuracy": all(
            r["ledger"]["final_accuracy"] == r["plain"]["final_accuracy"] for r in reps
        ),
    }


def interval(
    pairs_by_seed: list[list[float]], level: float = 0.9, draws: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """A bootstrap interval of the task's overhead (the median over seeds of each seed's
    median pair ratio): seeds drawn with replacement, then each drawn seed's pairs with
    replacement, ``draws`` times (a fixed generator: the same runs give the same interval);
    the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of the statistic."""
    import numpy as np

    rng = np.random.default_rng(seed)
    k = len(pairs_by_seed)
    stats = np.empty(draws)
    for j in range(draws):
        picked = rng.integers(0, k, k)
        meds = [np.median(rng.choice(pairs_by_seed[i], len(pairs_by_seed[i]))) for i in picked]
        stats[j] = np.median(meds)
    lo, hi = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)
