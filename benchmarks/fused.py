"""The fused reference of ``benchmarks/throughput.py``: the same rounds with nothing but training
and averaging, as fast as plain Python processes can do them on this machine.

Two ways on the CPU, a third where CUDA is available; the fastest is the ceiling:

* **one process, all threads**: the round's K clients as one stacked computation (the trainer's
  own vmap code) with torch's default intra-op threads;
* **one process per core, one thread each**: plain ``multiprocessing`` workers (spawned once, no
  Ray), each training its share of the round's clients as one stacked computation and returning
  the weighted sum of its updates; the parent adds the sums;
* where CUDA is available, **one process on the GPU**: the round's K clients as one stacked
  computation on the device (the data moved there once; a virtual population's gathered rows
  each round).

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

from actors.client_inputs import client_arrays
from simulator.config.sections import Config
from simulator.population.selection import select_clients
from simulator.rng import Stream, client_seeds, stream
from simulator.run.federation import Federation
from simulator.training.flat import FlatLayout
from simulator.training.spec import LocalSpec
from simulator.training.stacked import train_clients


def chosen_clients(cfg: Config, fed: Federation, rnd: int) -> np.ndarray:
    """The clients a FedSentry run of ``cfg`` selects in round ``rnd`` (every device online)."""
    return select_clients(
        fed.population,
        0.0,
        cfg.experiment.clients_per_round,
        np.zeros(0, np.int64),
        stream(cfg.experiment.seed, rnd, Stream.SELECT),
        seed=cfg.experiment.seed,
        period_s=3600.0,
    )


class _Trainer:
    """Trains a set of clients and returns the weighted sum of their updates."""

    def __init__(self, cfg: Config, fed: Federation, device: str = "cpu") -> None:
        a = cfg.algorithm
        self.spec = LocalSpec(a.lr, a.batch_size)
        self.epochs, self.seed = a.local_epochs, cfg.experiment.seed
        self.device = torch.device(device)
        self.model = fed.model_spec.build(seed=0).to(self.device)
        self.layout = FlatLayout(self.model)
        self.clients, self.x, self.y = fed.clients, fed.x_train, fed.y_train
        self.x_t = torch.from_numpy(self.x).to(self.device)
        self.y_t = torch.from_numpy(self.y).to(self.device)

    def __call__(self, g: np.ndarray, rnd: int, ids: np.ndarray) -> tuple[np.ndarray, float, int]:
        px, py, idx = client_arrays(self.clients, ids, self.x, self.y)
        x = self.x_t if px is None else torch.from_numpy(px).to(self.device)
        y = self.y_t if py is None else torch.from_numpy(py).to(self.device)
        seeds = client_seeds(self.seed, rnd, ids)
        out = train_clients(
            self.model,
            self.layout,
            torch.from_numpy(g).to(self.device),
            x,
            y,
            idx,
            [self.epochs] * len(ids),
            seeds.tolist(),
            self.spec,
        )
        w = np.array([len(i) for i in idx], np.float64)
        wt = torch.from_numpy(w.astype(np.float32)).to(self.device)
        s = (wt @ out.updates).double().cpu().numpy()
        return s, float(w.sum()), int(w.sum()) * self.epochs


def _worker(conn: Any, cfg: Config, fed: Federation) -> None:
    torch.set_num_threads(1)
    trainer = _Trainer(cfg, fed)
    while True:
        msg = conn.recv()
        if msg is None:
            return
        conn.send(trainer(*msg))


class _Fused:
    """A fused runner: ``round(r)`` trains round ``r``'s clients and averages them into its own
    global model; returns (client updates, samples)."""

    mode = ""

    def __init__(self, cfg: Config, fed: Federation) -> None:
        self.cfg, self.fed = cfg, fed
        self.g = fed.initial.numpy().astype(np.float32)

    def step(self, rnd: int, ids: np.ndarray) -> tuple[np.ndarray, float, int]:
        raise NotImplementedError

    def round(self, rnd: int) -> tuple[int, int]:
        ids = chosen_clients(self.cfg, self.fed, rnd)
        s, w, n = self.step(rnd, ids)
        self.g = self.g + (s / w).astype(np.float32)
        return len(ids), n

    def close(self) -> None:
        pass


class FusedThreads(_Fused):
    """One process, all cores' threads: the round as one stacked computation."""

    def __init__(self, cfg: Config, fed: Federation) -> None:
        super().__init__(cfg, fed)
        self.trainer = _Trainer(cfg, fed)
        self.threads = os.cpu_count() or 1
        self.mode = f"1 process x {self.threads} threads"

    def step(self, rnd: int, ids: np.ndarray) -> tuple[np.ndarray, float, int]:
        before = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            return self.trainer(self.g, rnd, ids)
        finally:
            torch.set_num_threads(before)


class FusedProcesses(_Fused):
    """One process per core, one thread each (plain multiprocessing, spawned once): each trains
    its share of the round's clients and returns the weighted sum of their updates."""

    def __init__(self, cfg: Config, fed: Federation, processes: int | None = None) -> None:
        super().__init__(cfg, fed)
        self.n = processes or os.cpu_count() or 1
        self.mode = f"{self.n} processes x 1 thread"
        ctx = mp.get_context("spawn")
        self.pipes, self.procs = [], []
        for _ in range(self.n):
            a, b = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(b, cfg, fed), daemon=True)
            p.start()
            self.pipes.append(a)
            self.procs.append(p)

    def step(self, rnd: int, ids: np.ndarray) -> tuple[np.ndarray, float, int]:
        parts = [c for c in np.array_split(ids, self.n) if len(c)]
        for conn, chunk in zip(self.pipes, parts, strict=False):
            conn.send((self.g, rnd, chunk))
        res = [conn.recv() for conn in self.pipes[: len(parts)]]
        return (np.sum([r[0] for r in res], axis=0), sum(r[1] for r in res), sum(r[2] for r in res))

    def close(self) -> None:
        for conn in self.pipes:
            conn.send(None)
        for p in self.procs:
            p.join(timeout=10)


class FusedCuda(_Fused):
    """One process on the GPU (CUDA): the round as one stacked computation on the device."""

    def __init__(self, cfg: Config, fed: Federation) -> None:
        super().__init__(cfg, fed)
        self.trainer = _Trainer(cfg, fed, device="cuda")
        self.mode = "1 process on cuda"

    def step(self, rnd: int, ids: np.ndarray) -> tuple[np.ndarray, float, int]:
        return self.trainer(self.g, rnd, ids)


def rates(updates: int, samples: int, seconds: float, rounds: int) -> dict[str, Any]:
    return {
        "rounds_timed": rounds,
        "seconds": seconds,
        "client_updates": updates,
        "samples": samples,
        "updates_per_s": updates / seconds,
        "samples_per_s": samples / seconds,
    }


def interleaved(
    runners: dict[str, Any],
    warmup: int,
    rounds: int,
    min_seconds: float = 0.0,
    block_seconds: float = 0.25,
) -> dict[str, dict[str, Any]]:
    """Time ``runners[name](r) -> (updates, samples)`` in turns: blocks of consecutive rounds
    of about ``block_seconds`` per runner, the runners taking turns, until each has run at least
    ``rounds`` timed rounds and ``min_seconds`` of its own time. Turns of a fraction of a second
    let every runner see the same machine (its speed drifts by tens of percent within minutes
    here) while each block pays a cold start (caches another process's round evicted) only
    once. Each runner does rounds 0, 1, 2, ... in order; its first ``warmup`` are not timed."""
    for run in runners.values():
        for r in range(warmup):
            run(r)
    acc = {k: [0.0, 0, 0, warmup] for k in runners}  # seconds, updates, samples, next round

    def short(a: list) -> bool:
        return a[3] - warmup < rounds or a[0] < min_seconds

    while any(short(a) for a in acc.values()):
        for k, run in runners.items():
            a = acc[k]
            if not short(a):  # done: a slower runner's turns must not add rounds to it
                continue
            start = time.perf_counter()
            while True:
                t0 = time.perf_counter()
                u, n = run(a[3])
                a[0] += time.perf_counter() - t0
                a[1] += u
                a[2] += n
                a[3] += 1
                if time.perf_counter() - start >= block_seconds or (
                    a[3] - warmup >= rounds and a[0] >= min_seconds
                ):
                    break
    return {k: rates(a[1], a[2], a[0], a[3] - warmup) for k, a in acc.items()}


def ceiling(results: dict[str, dict[str, Any]], modes: dict[str, str]) -> dict[str, Any]:
    """The best of the fused results (keys of ``modes``), with every mode's rate."""
    best = max(modes, key=lambda k: results[k]["updates_per_s"])
    return {
        **results[best],
        "mode": modes[best],
        "tried": {modes[k]: results[k]["updates_per_s"] for k in modes},
    }


def measure_fused(
    cfg: Config, fed: Federation, warmup: int, rounds: int, min_seconds: float = 0.0
) -> dict[str, Any]:
    """The ceiling alone: the fastest of :class:`FusedThreads`, :class:`FusedProcesses` and,
    where CUDA is available, :class:`FusedCuda`, timed in turns; every rate is kept under
    ``"tried"``."""
    runners: list[_Fused] = [FusedThreads(cfg, fed), FusedProcesses(cfg, fed)]
    if torch.cuda.is_available():
        runners.append(FusedCuda(cfg, fed))
    try:
        res = interleaved({r.mode: r.round for r in runners}, warmup, rounds, min_seconds)
    finally:
        for r in runners:
            r.close()
    return ceiling(res, {r.mode: r.mode for r in runners})
