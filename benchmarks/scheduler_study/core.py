"""The scheduler study's parts: the standard instances, and the recorded runs of every task that
the live and predictor parts read; the CSV files."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
from typing import Any

from benchmarks.scheduler_study import live as live_mod
from benchmarks.scheduler_study.cli import GA_SECONDS, PREDICTOR, REPEATS
from benchmarks.scheduler_study.instances import measure, table


def instances_part(a: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    """The standard-instance records and a note on the GA budget used."""
    from simulator.scheduler.instances import large_instance, standard_instances

    small, large = GA_SECONDS[a.mode]
    small = a.ga_seconds if a.ga_seconds is not None else small
    large = a.large_seconds if a.large_seconds is not None else large
    classes = standard_instances(a.seed)
    names = list(classes)[: a.instances_classes] if a.instances_classes else list(classes)
    records = [measure(n, classes[n], small, a.seed) for n in names]
    if not a.no_large:
        records.append(measure("large_i_hihi", large_instance(seed=a.seed), large, a.seed))
    note = (
        f"instances: {len(names)} of 12 Braun classes, GA {small:g} s each; "
        + ("10,000 x 64 skipped" if a.no_large else f"10,000 x 64 with GA {large:g} s")
        + (
            ""
            if (small, large, len(names), a.no_large) == (10.0, 60.0, 12, False)
            else " (full: 12 classes x 10 s, 60 s on 10,000 x 64)"
        )
    )
    print(table(records))
    print(note)
    return records, note


def run_plan(a: argparse.Namespace) -> list[tuple[str, int]]:
    """(label, repeat) of every run of a task, in execution order: the live placements
    interleaved repeat after repeat, then the predictor's other placements once."""
    plan: list[tuple[str, int]] = []
    if "live" in a.parts:
        reps = a.repeats or REPEATS[a.mode]
        plan = [(lab, r) for r in range(reps) for lab in a.live]
    if "predictor" in a.parts:
        plan += [(lab, 0) for lab in PREDICTOR[a.mode] if lab not in {x for x, _ in plan}]
    return plan


def recorded(a: argparse.Namespace) -> tuple[list[live_mod.Run], list[live_mod.TaskSetup]]:
    """Every task's runs (see :func:`run_plan`)."""
    from tqdm import tqdm

    plan = run_plan(a)
    bar = tqdm(total=len(plan) * len(a.tasks), desc="scheduler", unit="run", disable=a.no_progress)
    runs, setups = [], []
    try:
        for task in a.tasks:
            rounds = a.rounds or live_mod.ROUNDS[a.mode][task]
            r, s = live_mod.record(task, plan, rounds, a.seed, a.extra, a.ga_params, a.out, bar)
            runs += r
            setups.append(s)
    finally:
        bar.close()
    return runs, setups


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    """Flat rows (nested values as JSON) to ``path``."""
    if not rows:
        return
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow(
                {k: json.dumps(v) if isinstance(v, dict | list) else v for k, v in r.items()}
            )
