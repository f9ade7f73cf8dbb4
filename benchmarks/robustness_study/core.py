"""The grid's jobs (one per defense x fraction x seed) and their run, in this process or on a
pool of Ray actors."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import closing
from typing import Any

from benchmarks.robustness_study import grid
from benchmarks.robustness_study.worker import GridWorker, init_worker, run_job
from simulator.run.stop import DiskFull


def _kept(rec: dict[str, Any]) -> dict[str, Any]:
    """``rec``, unless its run found the disk full (:class:`DiskFull`)."""
    if rec.get("disk_full"):
        raise DiskFull(rec["disk_full"])
    return rec


def make_jobs(args: argparse.Namespace, base: dict[str, Any]) -> list[dict[str, Any]]:
    """One job per defense x malicious fraction x seed (fraction 0: the clean baseline, attack
    none), each with its flat config and, when its defense's precondition cannot hold with the
    parameters the run would use (the preset's with ``--defense-param`` over them), the
    ``n/a (precondition)`` error it is recorded with instead of running. Raises ValueError
    (one line) when a defense's parameters build no rule, before any run starts."""
    from defenses import DEFENSES

    n, rounds = int(base["clients_per_round"]), int(base["rounds"])
    jobs = []
    for d in args.defenses:
        for frac in args.fractions:
            attack = args.attack if frac > 0 else "none"
            given = args.defense_params.get(d, {})
            try:
                params, na = grid.defense_preset(
                    d, frac, n, rounds, set(DEFENSES), args.scenario, given
                )
            except ValueError as e:  # a user's parameter the preset's cannot take
                mine = " ".join(f"{d}.{k}={v}" for k, v in given.items())
                where = f"--defense-param {mine}" if given else f"the preset of {d}"
                raise ValueError(f"{where} at fraction {frac:g}: {e}") from None
            for s in range(args.seeds):
                out = args.out / "runs" / f"{attack}-{d}-f{frac:g}-s{s}"
                flat = {
                    **base,
                    "seed": s,
                    "defense": d,
                    "defense_params": params,
                    "attack": attack,
                    "attack_fraction": frac,
                    "attack_params": dict(args.attack_param) if frac > 0 else {},
                    "backend": "local",
                    "progress": False,
                    "plots": False,
                    "out": str(out),
                }
                jobs.append(
                    {
                        "attack": attack,
                        "defense": d,
                        "malicious_fraction": frac,
                        "seed": s,
                        "flat": flat,
                        "error": na,
                        "resume": bool(getattr(args, "resume", False)),
                    }
                )
    return jobs


def run_all(
    jobs: list[dict[str, Any]], workers: int, ray_address: str | None = None
) -> list[dict[str, Any]]:
    """Every job's record (:func:`~benchmarks.robustness_study.worker.run_job`), in the order
    of ``jobs``: in this process with ``workers`` 1, else on ``workers`` Ray actors. Raises
    :class:`DiskFull` as soon as a run finds its disk full."""
    from tqdm import tqdm

    results: list[dict[str, Any]] = []
    bar = tqdm(total=len(jobs), desc="runs", unit="run", file=sys.stderr)
    try:
        if workers == 1:
            import torch

            threads = torch.get_num_threads()
            init_worker()
            try:
                for j in jobs:
                    results.append(_kept(run_job(j)))
                    bar.update()
            finally:
                torch.set_num_threads(threads)
        else:
            with closing(_on_ray(jobs, workers, ray_address)) as recs:  # closed: actors killed
                for rec in recs:
                    results.append(_kept(rec))
                    bar.update()
    finally:  # a stopped grid's bar ends before the line saying how to go on
        bar.close()
    order = {(j["defense"], j["malicious_fraction"], j["seed"]): i for i, j in enumerate(jobs)}
    return sorted(results, key=lambda r: order[(r["defense"], r["malicious_fraction"], r["seed"])])


def _on_ray(
    jobs: list[dict[str, Any]], workers: int, ray_address: str | None
) -> Iterator[dict[str, Any]]:
    """The jobs' records, as they finish, from a pool of ``workers`` Ray actors (one
    CPU and one torch thread each: each run trains its clients in-process with the stacked
    trainer, so the grid's parallelism is across runs); the actors are killed afterwards."""
    from actors.ray_setup import ensure_ray

    ensure_ray(ray_address)
    import ray
    from ray.util import ActorPool

    worker = ray.remote(num_cpus=1)(GridWorker)
    actors = [worker.remote() for _ in range(workers)]
    try:
        yield from ActorPool(actors).map_unordered(lambda a, j: a.run.remote(j), jobs)
    finally:
        for a in actors:  # all idle once the map is drained
            ray.kill(a)
