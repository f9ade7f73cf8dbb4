"""Client-update throughput of federated algorithms against FedAvg's, on one throughput task.

By default every registered algorithm, MOON also on its own model (``moon:mu=0``), and FedBN
with FedAvg on the same BatchNorm model (``fedbn@norm=batch`` against ``fedavg@norm=batch``:
an arm's ``@KEY=VALUE`` part changes its model, KEY in hidden, norm). The
bars (:data:`BARS`): FedFM, FedFA, FedALA and the multi-branch classifier (FedVB) keep >= 0.7 of
FedAvg's client-updates/s on the digits MLP k100 task (vectorized); MOON >= 0.7 of FedAvg on
MOON's own model. This script runs that task of ``benchmarks/throughput.py`` (same
config: 100 clients, all 100 a round, E = 1, B = 10, lr 0.05) once per algorithm, FedAvg
included, through full engine rounds (selection, training with the algorithm's vectorized
client step, its server update), and times them **in turns**
(:func:`benchmarks.fused.interleaved`: blocks of rounds of a fraction of a second, the
algorithms taking turns, so each sees the same machine, whose speed drifts within minutes),
in-process by default (``--backend local``; ``ray`` times the arms one after another).
Start-up and warm-up rounds are not timed, evaluation never. ``--repeats`` such measurements;
each algorithm's best rate is reported with its ratio to FedAvg's best.

What bounds the ratio (per training sample, in forward-pass units of the model, E = 1):
FedAvg costs ~3 (forward and backward). MOON adds two gradient-free forwards of the encoder
(global and previous model), so on a model whose cost is its encoder its ratio to FedAvg on
the *same* model tends to 3/5 = 0.6 by FLOPs; and MOON's projection head (64-64-256 with the
classifier on 256) makes the digits MLP 3.5x larger (31,690 vs 8,970 parameters), which alone
caps MOON against the plain MLP near 1/3.5. Measure MOON against FedAvg on its own model with
``--algorithm moon:mu=0``. FedFM and FedFA add one forward of the model per epoch (the local
anchors) or a few element-wise operations per stage, a ceiling of ~0.75 by FLOPs.

An algorithm whose clients use the server's public set (KT-pFL) needs one: when any arm does
and the task has none, every arm (FedAvg included) runs with :data:`PUBLIC_FRACTION` of the
training set carved out as the public set, so all arms train on the same client data.

Usage::

    python benchmarks/algorithm_throughput.py                      # every algorithm
    python benchmarks/algorithm_throughput.py --algorithm ditto --algorithm fedprox:mu=0.01
    python benchmarks/algorithm_throughput.py --quick --json alg.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.fused import interleaved  # noqa: E402
from benchmarks.stops import run_stoppable, write_text  # noqa: E402
from benchmarks.throughput_study import checks  # noqa: E402
from benchmarks.throughput_study.algorithm_arms import (  # noqa: E402
    Arm,
    arm_config,
    default_arms,
    parse_arm,
)
from benchmarks.throughput_study.algorithm_rows import BAR, best_rows, print_rows  # noqa: E402
from benchmarks.throughput_study.tasks import EPOCHS, TASKS, Task, task_config  # noqa: E402
from simulator.algorithms import ALGORITHMS  # noqa: E402
from simulator.cli import OneLineParser  # noqa: E402
from simulator.config.fields import ConfigError  # noqa: E402
from simulator.config.sections import Config  # noqa: E402
from simulator.round.engine import Simulation  # noqa: E402
from simulator.run.federation import build_federation  # noqa: E402

#: the public set of every arm when one of them uses it and the task has none
PUBLIC_FRACTION = 0.1


def with_public(base: Config, names: list[str]) -> Config:
    """``base`` with a public set of :data:`PUBLIC_FRACTION` when an algorithm of ``names``
    uses one and ``base`` has none (otherwise ``base``)."""
    if base.data.public_fraction > 0 or not any(ALGORITHMS.get(n).uses_public for n in names):
        return base
    return dataclasses.replace(
        base, data=dataclasses.replace(base.data, public_fraction=PUBLIC_FRACTION)
    )


def measure(
    task: Task,
    arms: dict[str, Arm],
    seed: int,
    actors: int,
    backend: str,
    warmup: int,
    rounds: int,
    min_seconds: float,
) -> dict[str, dict[str, Any]]:
    """One measurement, ``{arm: rates}``. In-process (``local``): every arm's engine rounds
    timed in turns. With ``ray`` each Simulation's actors hold the CPUs, so two cannot live at
    once: the arms are timed one after another instead (less robust to the machine's drift)."""
    base = with_public(task_config(task, seed, actors), [a[0] for a in arms.values()])
    if backend != base.execution.backend:
        base = dataclasses.replace(
            base, execution=dataclasses.replace(base.execution, backend=backend)
        )
    t0 = time.perf_counter()

    def open_arm(
        name: str, params: dict[str, Any], model: dict[str, str]
    ) -> tuple[Simulation, Any]:
        cfg = arm_config(base, name, params, model)
        fed = build_federation(cfg)  # the model depends on the algorithm
        sim = Simulation(cfg, federation=fed)

        def run(r: int) -> tuple[int, int]:
            rec = sim.run_round(r, t0)
            return len(rec.participants), int(fed.sizes(rec.participants).sum()) * EPOCHS

        return sim, run

    if backend == "ray":
        out: dict[str, dict[str, Any]] = {}
        for arm, spec in arms.items():
            sim, run = open_arm(*spec)
            try:
                out.update(interleaved({arm: run}, warmup, rounds, min_seconds))
            finally:
                sim.close()
        return out
    sims: list[Simulation] = []
    runners: dict[str, Any] = {}
    try:
        for arm, spec in arms.items():
            sim, runners[arm] = open_arm(*spec)
            sims.append(sim)
        return interleaved(runners, warmup, rounds, min_seconds)
    finally:
        for sim in sims:
            sim.close()


def build_parser() -> argparse.ArgumentParser:
    """The command line (every flag explained in ``--help``)."""
    p = OneLineParser(
        description="Client-updates/s of algorithms vs FedAvg on a task of "
        "benchmarks/throughput.py, timed in turns in one process.",
        formatter_class=checks.DefaultsHelp,
    )
    p.add_argument(
        "--algorithm",
        action="append",
        default=None,
        metavar="NAME[:K=V,...]",
        help="an algorithm to compare with FedAvg (repeatable; NAME[:K=V,...][@KEY=VALUE,...], "
        "the @ part changing the arm's model, KEY in hidden, norm; default: every registered "
        "algorithm, moon:mu=0 (FedAvg on MOON's model, MOON's bar reference), and fedbn only "
        "as fedbn@norm=batch beside fedavg@norm=batch)",
    )
    p.add_argument(
        "--task",
        default="digits-mlp-k100",
        choices=[t.name for t in TASKS],
        help="the task of benchmarks/throughput.py the algorithms train on",
    )
    p.add_argument(
        "--backend",
        default="local",
        choices=["local", "ray"],
        help="local: in-process, algorithms timed in turns; ray: throughput.py's "
        "backend, algorithms timed one after another (its actors hold the "
        "CPUs). On digits-mlp-k100 a round is below the inline threshold "
        "(300 MFLOP), so ray trains it in the driver too",
    )
    p.add_argument("--actors", type=int, default=0, help="device actors (0 = one per CPU)")
    p.add_argument("--quick", action="store_true", help="fewer timed rounds and repeats")
    p.add_argument(
        "--rounds", type=int, default=None, help="timed rounds per algorithm (default 20; quick: 8)"
    )
    p.add_argument(
        "--min-seconds",
        type=float,
        default=None,
        help="timed seconds per algorithm at least (default 5; quick: 2)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="measurements; each algorithm's best is reported (default 3; quick 2)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of partition and sampling")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    """Time the arms; print their rates and ratios to FedAvg; write ``--json``. Returns the
    exit code (2 on bad input, with a one-line error)."""
    p = build_parser()
    args = p.parse_args(argv)
    checks.at_least_one(p, args, ["rounds", "repeats"])
    checks.seed_and_actors(p, args.seed, args.actors)
    try:
        wanted = args.algorithm or default_arms()
        arms: dict[str, Arm] = {"fedavg": ("fedavg", {}, {})}
        for text in wanted:
            if text != "fedavg":
                arms[text] = parse_arm(text)
        base = with_public(
            task_config(next(t for t in TASKS if t.name == args.task), args.seed, 0),
            [a[0] for a in arms.values()],
        )
        for spec in arms.values():
            arm_config(base, *spec)
    except (ValueError, ConfigError, TypeError) as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    rounds = args.rounds if args.rounds is not None else (8 if args.quick else 20)
    min_s = args.min_seconds if args.min_seconds is not None else (2.0 if args.quick else 5.0)
    repeats = args.repeats if args.repeats is not None else (2 if args.quick else 3)
    if not 0 <= min_s < float("inf"):
        p.error(f"--min-seconds: must be a finite number >= 0, got {min_s}")
    checks.outputs(p, {"--json": args.json})  # before minutes of timing
    task = next(t for t in TASKS if t.name == args.task)
    return run_stoppable(
        "algorithm_throughput", lambda: _time_arms(args, task, arms, rounds, min_s, repeats)
    )


def _time_arms(
    args: argparse.Namespace,
    task: Task,
    arms: dict[str, Arm],
    rounds: int,
    min_s: float,
    repeats: int,
) -> int:
    """Time the arms ``repeats`` times; print their best rates and ratios to FedAvg; write
    ``--json`` (whole). Returns the exit code (2 on an arm its model cannot host)."""
    backend = args.backend
    runs: list[dict[str, dict[str, Any]]] = []
    for rep in range(repeats):
        print(f"[{task.name}] {list(arms)} ({rep + 1}/{repeats}) ...", file=sys.stderr, flush=True)
        try:
            runs.append(
                measure(
                    task,
                    arms,
                    args.seed,
                    args.actors,
                    backend,
                    warmup=3,
                    rounds=rounds,
                    min_seconds=min_s,
                )
            )
        except ConfigError as e:  # an arm its model cannot host (fedbn without BatchNorm)
            print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
            return 2
    rows = best_rows(runs, list(arms))
    how = "timed in turns" if backend == "local" else "timed one after another"
    print(f"{task.name}, backend {backend}, best of {repeats} ({how})")
    print_rows(rows)
    if args.json:
        meta = {
            "task": task.name,
            "backend": backend,
            "repeats": repeats,
            "bar": BAR,
            "device": "cuda" if torch.cuda.is_available() else "cpu",
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
        }
        write_text(args.json, json.dumps({"algorithms": rows, "meta": meta}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
