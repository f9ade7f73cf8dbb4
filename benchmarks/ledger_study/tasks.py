"""The ledger study's tasks and their runs: each seed recorded without and with the ledger,
interleaved (the order alternates from seed to seed, since this machine's speed drifts).

``robustness`` is the robustness benchmark's default task (10 IID digits clients, all of them
every round, E=5, MLP, 30 rounds; multikrum against 20% label flipping, so some rows are
rejected); ``crossdevice`` 10^6 virtual digits clients, 1,000 a round, E=1, 10 rounds, on the Ray
actor pool. There each seed also runs a third time, without the ledger and without the
actors' partial sums (``preaggregate=false``: the ledger needs every row in the driver, so a
ledger run ships rows), which splits the overhead into that row path and the recorder.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Any

from benchmarks.robustness_study import grid

TASKS: dict[str, dict[str, Any]] = {
    "robustness": {"rounds": 30, "seeds": 6},
    "crossdevice": {"rounds": 10, "seeds": 2, "num_clients": 1_000_000, "clients_per_round": 1000},
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
            "num_clients": args.population or (100_000 if args.quick else t["num_clients"]),
            "clients_per_round": args.clients_per_round
            or (100 if args.quick else t["clients_per_round"]),
        }
    if getattr(args, "driver_cpus_set", None) and task == "crossdevice":
        flat["num_actors"] = len(args.driver_cpus_set)  # one actor per pinned CPU
    flat.update(progress=False, plots=False, committee=args.committee, ledger_url=args.ledger_url)
    flat.update(dict(args.overrides))
    return flat


def record(task: str, args: argparse.Namespace) -> dict[str, Any]:
    """Each seed without and with the ledger, interleaved; the task's figures."""
    from tqdm import tqdm

    from simulator.config.sections import build_config
    from simulator.run.experiment import run_experiment

    flat = task_config(task, args)
    seeds = args.seeds or (2 if args.quick else TASKS[task]["seeds"])
    # the ledger needs every row in the driver, so a linear rule's partial sums on the actors
    # are off with it: the "rows" arm (no ledger, no pre-aggregation) splits the overhead
    # into that row path and the recorder
    split = task == "crossdevice" and getattr(args, "split_row_path", True)
    cores = os.cpu_count() or 1
    runs = []
    for s in tqdm(range(seeds), desc=task, unit="seed", disable=not args.progress, file=sys.stderr):
        times: dict[str, float] = {}
        out: dict[str, dict[str, Any]] = {}
        arms = ["plain", "ledger"] + (["rows"] if split else [])
        for arm in arms if s % 2 == 0 else arms[::-1]:
            d = args.out / task / f"{arm}-s{s}"
            extra = {"preaggregate": False} if arm == "rows" else {}
            res = run_experiment(
                build_config(
                    flat={**flat, **extra, "seed": s, "out": str(d), "ledger": arm == "ledger"}
                )
            )
            times[arm], out[arm] = res["run_seconds"], res
        lg = out["ledger"]["ledger"]
        runs.append(
            {
                "seed": s,
                "run_dir": out["ledger"]["out"],
                "plain_seconds": times["plain"],
                "ledger_seconds": times["ledger"],
                "rows_seconds": times.get("rows"),
                "overhead": times["ledger"] / times["plain"] - 1,
                "row_path_overhead": times["rows"] / times["plain"] - 1 if split else None,
                "recorder_lag_max": lg["recorder_lag_max"],
                "recorder_busy_s": lg["recorder_seconds"],
                "recorder_cpu_s": lg.get("recorder_cpu_seconds"),
                "driver_waited_s": lg["ledger_seconds"],
                "gas_per_round": lg["gas_per_round"],
                "same_accuracy": out["ledger"]["final_accuracy"] == out["plain"]["final_accuracy"],
            }
        )
    return {
        "task": task,
        "clients_per_round": flat["clients_per_round"],
        "population": flat["num_clients"],
        "rounds": flat["rounds"],
        "runs": runs,
        "overhead": statistics.median(r["overhead"] for r in runs),
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
