"""The fused reference of ``benchmarks/throughput.py``: the same rounds with nothing but training
and averaging, as fast as plain Python processes can do them on this machine.

Two ways, and the faster one is the ceiling:

* **one process, all threads**: the round's K clients as one stacked computation (the trainer's
  own vmap code) with torch's default intra-op threads;
* **one process per core, one thread each**: plain ``multiprocessing`` workers (spawned once, no
  Ray), each training its share of the round's clients as one stacked computation and returning
  the weighted sum of its updates; the parent adds the sums.

No virtual clock, no defense, no verdicts, no logs, no Ray: what is left is the work itself.
Clients, seeds and weights are those of a FedSentry run of the same task (FedAvg, E local epochs,
sample-weighted mean).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from typing import Any

import numpy as np
import torch

from actors.trainer import client_arrays
from simulator.config import Config
from simulator.rounds import _SELECT, client_seeds, stream
from simulator.selection import select_clients
from simulator.setup import Federation
from simulator.training import FlatLayout, LocalSpec, train_clients


def chosen_clients(cfg: Config, fed: Federation, rnd: int) -> np.ndarray:
    """The clients a FedSentry run of ``cfg`` selects in round ``rnd`` (every device online)."""
    return select_clients(fed.population, 0.0, cfg.experiment.clients_per_round,
                          np.zeros(0, np.int64), stream(cfg.experiment.seed, rnd, _SELECT),
                          seed=cfg.experiment.seed, period_s=3600.0)


class _Trainer:
    """Trains a set of clients and returns the weighted sum of their updates."""

    def __init__(self, cfg: Config, fed: Federation) -> None:
        a = cfg.algorithm
        self.spec = LocalSpec(a.lr, a.batch_size)
        self.epochs, self.seed = a.local_epochs, cfg.experiment.seed
        self.model = fed.model_spec.build(seed=0)
        self.layout = FlatLayout(self.model)
        self.clients, self.x, self.y = fed.clients, fed.x_train, fed.y_train

    def __call__(self, g: np.ndarray, rnd: int, ids: np.ndarray) -> tuple[np.ndarray, float, int]:
        px, py, idx = client_arrays(self.clients, ids, self.x, self.y)
        x = torch.from_numpy(self.x if px is None else px)
        y = torch.from_numpy(self.y if py is None else py)
        seeds = client_seeds(self.seed, rnd, ids)
        out = train_clients(self.model, self.layout, torch.from_numpy(g), x, y, idx,
                            [self.epochs] * len(ids), seeds.tolist(), self.spec)
        w = np.array([len(i) for i in idx], np.float64)
        s = (torch.from_numpy(w.astype(np.float32)) @ out.updates).double().numpy()
        return s, float(w.sum()), int(w.sum()) * self.epochs


def _worker(conn: Any, cfg: Config, fed: Federation) -> None:
    torch.set_num_threads(1)
    trainer = _Trainer(cfg, fed)
    while True:
        msg = conn.recv()
        if msg is None:
            return
        conn.send(trainer(*msg))


def _timed(step: Any, cfg: Config, fed: Federation, warmup: int, rounds: int,
           min_seconds: float) -> dict[str, Any]:
    """Run ``step(g, rnd, ids) -> (sum, weight, samples)`` rounds; time the post-warm-up ones."""
    g = fed.layout.flatten(fed.model).numpy().astype(np.float32)
    updates = samples = 0
    start, r = 0.0, 0
    while r < warmup + rounds or time.perf_counter() - start < min_seconds:
        if r == warmup:
            start = time.perf_counter()
        ids = chosen_clients(cfg, fed, r)
        s, w, n = step(g, r, ids)
        g = g + (s / w).astype(np.float32)
        if r >= warmup:
            updates += len(ids)
            samples += n
        r += 1
    sec = time.perf_counter() - start
    return {"rounds_timed": r - warmup, "seconds": sec, "client_updates": updates,
            "samples": samples, "updates_per_s": updates / sec, "samples_per_s": samples / sec}


def fused_threads(cfg: Config, fed: Federation, warmup: int, rounds: int,
                  min_seconds: float = 0.0) -> dict[str, Any]:
    """One process, torch's default threads: the round as one stacked computation."""
    threads = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)
    try:
        out = _timed(_Trainer(cfg, fed), cfg, fed, warmup, rounds, min_seconds)
    finally:
        torch.set_num_threads(threads)
    return {**out, "mode": f"1 process x {os.cpu_count()} threads"}


def fused_processes(cfg: Config, fed: Federation, warmup: int, rounds: int,
                    min_seconds: float = 0.0, processes: int | None = None) -> dict[str, Any]:
    """One process per core, one thread each (plain multiprocessing, spawned once)."""
    n = processes or os.cpu_count() or 1
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    for _ in range(n):
        a, b = ctx.Pipe()
        p = ctx.Process(target=_worker, args=(b, cfg, fed), daemon=True)
        p.start()
        pipes.append(a)
        procs.append(p)

    def step(g: np.ndarray, rnd: int, ids: np.ndarray) -> tuple[np.ndarray, float, int]:
        parts = [c for c in np.array_split(ids, n) if len(c)]
        for conn, chunk in zip(pipes, parts, strict=False):
            conn.send((g, rnd, chunk))
        res = [conn.recv() for conn in pipes[:len(parts)]]
        return (np.sum([r[0] for r in res], axis=0), sum(r[1] for r in res),
                sum(r[2] for r in res))

    try:
        out = _timed(step, cfg, fed, warmup, rounds, min_seconds)
    finally:
        for conn in pipes:
            conn.send(None)
        for p in procs:
            p.join(timeout=10)
    return {**out, "mode": f"{n} processes x 1 thread"}


def measure_fused(cfg: Config, fed: Federation, warmup: int, rounds: int,
                  min_seconds: float = 0.0) -> dict[str, Any]:
    """The ceiling: the faster of :func:`fused_threads` and :func:`fused_processes`; both
    results are kept under ``"tried"``."""
    tried = [fused_threads(cfg, fed, warmup, rounds, min_seconds),
             fused_processes(cfg, fed, warmup, rounds, min_seconds)]
    best = max(tried, key=lambda r: r["updates_per_s"])
    return {**best, "tried": {r["mode"]: r["updates_per_s"] for r in tried}}
