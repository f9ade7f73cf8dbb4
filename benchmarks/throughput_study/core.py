"""The throughput study's measurements: FedSentry's engine rounds and the fused ceiling timed in
turns, Flower's simulation, and one task's record with the ratios."""

from __future__ import annotations

import argparse
import functools
import sys
import time
from typing import Any

import torch

from benchmarks.fused import FusedCuda, FusedProcesses, FusedThreads, ceiling, interleaved
from benchmarks.stops import ctrl_c_blocked
from benchmarks.throughput_study.tasks import BATCH, EPOCHS, LR, Task, task_config
from simulator.config.sections import Config
from simulator.round.engine import Simulation
from simulator.run.federation import Federation, build_federation
from simulator.training.models import ModelSpec


def measure(
    cfg: Config, fed: Federation, warmup: int, rounds: int, min_seconds: float = 0.0
) -> tuple[dict[str, Any], dict[str, Any]]:
    """FedSentry (full engine rounds) and the fused ceiling, timed round by round in turns
    (see :func:`benchmarks.fused.interleaved`): at least ``rounds`` timed rounds each and at
    least ``min_seconds`` of each one's own time (a cheap round is a few ms)."""
    sim = Simulation(cfg, federation=fed)
    with ctrl_c_blocked():  # its workers: a traceback each on Ctrl-C; closed below
        fused = [FusedThreads(cfg, fed), FusedProcesses(cfg, fed)]
    if torch.cuda.is_available():
        fused.append(FusedCuda(cfg, fed))
    where: set[str] = set()
    t0 = time.perf_counter()

    def fedsentry(r: int) -> tuple[int, int]:
        rec = sim.run_round(r, t0)
        where.add(rec.extra["trained_in"])
        return len(rec.participants), int(fed.sizes(rec.participants).sum()) * EPOCHS

    try:
        res = interleaved(
            {"fedsentry": fedsentry, **{f.mode: f.round for f in fused}},
            warmup,
            rounds,
            min_seconds,
        )
    finally:
        sim.close()
        for f in fused:
            f.close()
    fs = {**res["fedsentry"], "actors": sim.executor.num_workers, "trained_in": sorted(where)}
    return fs, ceiling(res, {f.mode: f.mode for f in fused})


def _build(spec: ModelSpec) -> torch.nn.Module:
    return spec.build(seed=0)


def measure_flower(
    fed: Federation,
    task: Task,
    seed: int,
    rounds: int,
    cpus: tuple[float, ...],
    gpus: tuple[float, ...] = (),
) -> dict[str, Any]:
    from benchmarks.peers.flower_peer import best_flower

    if task.partition == "virtual":
        data: Any = (fed.x_train, fed.y_train, fed.clients)
    else:
        data = [(fed.x_train[i], fed.y_train[i]) for i in fed.client_index]
    # a 1,000-client Flower round takes minutes here: its actor start-up is a negligible part
    # of it, so the large task times its first round instead of discarding it as warm-up
    warmup = 0 if task.clients_per_round >= 1000 else 1
    return best_flower(
        data,
        functools.partial(_build, fed.model_spec),
        rounds=rounds + warmup,
        clients_per_round=task.clients_per_round,
        epochs=EPOCHS,
        batch_size=BATCH,
        lr=LR,
        seed=seed,
        warmup_rounds=warmup,
        cpus_options=cpus,
        gpus_options=gpus,
    )


def measure_task(
    task: Task, args: argparse.Namespace, rounds: int, frounds: int, min_s: float, repeats: int
) -> dict[str, Any]:
    """One task's record: FedSentry's and the fused ceiling's best of ``repeats``
    measurements (timed round by round in turns), Flower's (unless ``--no-flower``) and the
    ratios."""
    name = task.name
    cfg = task_config(task, args.seed, args.actors)
    fed = build_federation(cfg)
    # FedSentry and the ceiling are timed round by round in turns (this machine's speed
    # drifts by tens of percent within minutes); --repeats such measurements, each best
    pairs = []
    for rep in range(repeats):
        print(
            f"[{name}] fedsentry and fused ({rep + 1}/{repeats}) ...", file=sys.stderr, flush=True
        )
        pairs.append(measure(cfg, fed, warmup=3, rounds=rounds, min_seconds=min_s))
    fs = {
        **max((p[0] for p in pairs), key=lambda r: r["updates_per_s"]),
        "repeats": [p[0]["updates_per_s"] for p in pairs],
    }
    fu = {
        **max((p[1] for p in pairs), key=lambda r: r["updates_per_s"]),
        "repeats": [p[1]["updates_per_s"] for p in pairs],
    }
    fl = None
    if not args.no_flower:
        print(f"[{name}] flower ...", file=sys.stderr, flush=True)
        fr, cpus = frounds, tuple(args.flower_cpus)
        if task.clients_per_round >= 1000:  # minutes a round; 2 CPUs a client is slower
            fr = args.flower_rounds_large or (1 if args.quick else 2)
            cpus = cpus[:1]
        fl = measure_flower(fed, task, args.seed, fr, cpus, tuple(args.flower_gpus or ()))
    return {
        "name": name,
        "fedsentry": fs,
        "flower": fl,
        "fused": fu,
        "speedup_vs_flower": fs["updates_per_s"] / fl["updates_per_s"] if fl else None,
        "fraction_of_fused": fs["updates_per_s"] / fu["updates_per_s"],
    }
