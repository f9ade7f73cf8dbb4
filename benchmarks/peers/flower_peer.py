"""Flower (1.41, Message API, Ray backend) peer runner for the throughput benchmark.

The simulation runs in a fresh child interpreter that starts its own local Ray instance
(``address="local"``), so it neither clashes with nor joins a Ray the caller runs. Client
data is written once to a temporary ``.npz``; each Ray actor process loads it once and
looks clients up by their ``partition-id``, so only weights and a small config travel in
messages (the child's side: :mod:`benchmarks.peers.flower_apps`).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from benchmarks.peers import flower_apps


def _launch(spec: dict[str, Any], model_fn: Callable[[], nn.Module], workdir: str) -> Any:
    """Run :func:`~benchmarks.peers.flower_apps.child_main` in a fresh interpreter that sees this
    process's ``sys.path``."""
    from ray import cloudpickle

    with open(os.path.join(workdir, "job.pkl"), "wb") as fh:
        cloudpickle.dump((spec, model_fn), fh)  # by value if model_fn lives in __main__
    pythonpath = os.pathsep.join(p or os.getcwd() for p in sys.path)
    env = {**os.environ, **flower_apps.OFFLINE_ENV, "PYTHONPATH": pythonpath}
    env.pop("RAY_ADDRESS", None)
    code = (
        f"import importlib, sys; importlib.import_module({flower_apps.__name__!r})"
        ".child_main(sys.argv[1])"
    )
    log_path = os.path.join(workdir, "child.log")
    with open(log_path, "wb") as log:
        proc = subprocess.run(
            [sys.executable, "-c", code, workdir],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    result_path = os.path.join(workdir, "result.pkl")
    if proc.returncode != 0 or not os.path.exists(result_path):
        with open(log_path, errors="replace") as fh:
            raise RuntimeError(
                f"Flower simulation failed (exit code {proc.returncode}):\n" + fh.read()[-6000:]
            )
    with open(result_path, "rb") as fh:
        return pickle.load(fh)


def run_flower(
    client_data: Sequence[tuple[np.ndarray, np.ndarray]] | tuple[np.ndarray, np.ndarray, Any],
    model_fn: Callable[[], nn.Module],
    *,
    rounds: int,
    clients_per_round: int,
    epochs: int,
    batch_size: int,
    lr: float,
    seed: int,
    client_cpus: float = 1.0,
    client_gpus: float = 0.0,
    warmup_rounds: int = 1,
) -> dict[str, Any]:
    """Run FedAvg as a Flower simulation and time the post-warm-up training rounds.

    Parameters
    ----------
    client_data : sequence of (ndarray, ndarray), or (ndarray, ndarray, ClientData)
        Per-client ``(x float32 [n_k, ...], y int64 [n_k])``; client ``k`` is Flower
        partition ``k``. Or a population too large to write out: ``(pool_x, pool_y, source)``
        with a :class:`simulator.data.clients.ClientData` whose ``rows(k)`` index the pool
        (virtual clients); each Flower client rebuilds its data from its partition id.
    model_fn : callable
        Picklable zero-argument model builder (module-level function or partial).
    rounds : int
        Total server rounds, warm-up included; must exceed ``warmup_rounds``.
    clients_per_round : int
        Clients sampled (without replacement) by the server each round.
    epochs, batch_size : int
        Local epochs and mini-batch size.
    lr : float
        Client SGD learning rate (no momentum).
    seed : int
        Seeds the initial model, node sampling and client shuffles.
    client_cpus : float, default 1.0
        Ray CPUs per client; the actor pool holds ``floor(CPUs / client_cpus)`` actors.
    client_gpus : float, default 0.0
        Ray GPU share per client; above 0 the clients train on CUDA (and the pool also holds
        at most ``floor(GPUs / client_gpus)`` actors).
    warmup_rounds : int, default 1
        Leading rounds left out of the timing (they absorb Ray/actor start-up).

    Returns
    -------
    dict
        ``rounds_timed, seconds, client_updates, samples, updates_per_s, samples_per_s,
        client_cpus, client_gpus, final_weights_ok`` plus diagnostics in seconds:
        ``startup_s`` (from ``run_simulation`` to the first timed round: Ray start, actor pool,
        warm-up rounds),
        ``imports_s`` (child start to ``run_simulation``), ``shutdown_s`` and ``round_s``
        (list of timed rounds' durations).
    """
    virtual = (
        isinstance(client_data, tuple) and len(client_data) == 3 and hasattr(client_data[2], "rows")
    )
    n = client_data[2].num_clients if virtual else len(client_data)
    if not 0 <= warmup_rounds < rounds:
        raise ValueError("need 0 <= warmup_rounds < rounds")
    if not 1 <= clients_per_round <= n:
        raise ValueError("need 1 <= clients_per_round <= len(client_data)")
    if min(epochs, batch_size) < 1 or client_cpus <= 0:
        raise ValueError("epochs, batch_size and client_cpus must be positive")
    if not 0 <= client_gpus <= 1:
        raise ValueError(f"client_gpus must be in [0, 1], got {client_gpus}")
    if client_gpus > 0 and not torch.cuda.is_available():
        raise ValueError("client_gpus > 0 needs a CUDA device; this machine has none")
    with tempfile.TemporaryDirectory(prefix="flower_peer_") as tmp:
        path = _write_clients(client_data, virtual, n, tmp)
        spec = {
            "data_path": path,
            "num_clients": n,
            "rounds": rounds,
            "clients_per_round": clients_per_round,
            "epochs": epochs,
            "batch_size": batch_size,
            "lr": lr,
            "seed": seed,
            "client_cpus": client_cpus,
            "client_gpus": client_gpus,
            "warmup_rounds": warmup_rounds,
        }
        return _launch(spec, model_fn, tmp)


def _write_clients(client_data: Any, virtual: bool, n: int, tmp: str) -> str:
    """Write the clients' data for the child: ``clients.npz`` in ``tmp`` (the pool, and the
    client data source in ``source.pkl`` beside it, for a virtual population); its path."""
    path = os.path.join(tmp, "clients.npz")
    if virtual:
        px, py, source = client_data
        np.savez(path, pool_x=np.asarray(px, np.float32), pool_y=np.asarray(py, np.int64))
        with open(os.path.join(tmp, "source.pkl"), "wb") as fh:
            pickle.dump(source, fh)
    else:
        np.savez(
            path,
            count=np.asarray(n),
            **{f"x{i}": np.asarray(x, np.float32) for i, (x, _) in enumerate(client_data)},
            **{f"y{i}": np.asarray(y, np.int64) for i, (_, y) in enumerate(client_data)},
        )
    return path


def best_flower(
    client_data: Sequence[tuple[np.ndarray, np.ndarray]],
    model_fn: Callable[[], nn.Module],
    *,
    cpus_options: Sequence[float] = (1.0, 2.0),
    gpus_options: Sequence[float] = (),
    **kwargs: Any,
) -> dict[str, Any]:
    """Run :func:`run_flower` for each ``client_cpus`` option (CPU clients) and each
    ``gpus_options`` share (clients on CUDA, one CPU each) and return the fastest.

    Parameters
    ----------
    client_data, model_fn, **kwargs
        As for :func:`run_flower` (``rounds``, ``clients_per_round``, ... but not
        ``client_cpus``).
    cpus_options : sequence of float, default (1.0, 2.0)
        ``client_cpus`` values to try.
    gpus_options : sequence of float, default ()
        ``client_gpus`` shares to try (with ``client_cpus=1``).

    Returns
    -------
    dict
        The result with the highest ``updates_per_s``, plus ``"tried"``:
        ``{client_cpus: updates_per_s}`` for every CPU option and ``{"gpu=G":
        updates_per_s}`` for every GPU option.
    """
    if not cpus_options and not gpus_options:
        raise ValueError("cpus_options and gpus_options are both empty")
    runs = [run_flower(client_data, model_fn, client_cpus=c, **kwargs) for c in cpus_options]
    runs += [
        run_flower(client_data, model_fn, client_cpus=1.0, client_gpus=g, **kwargs)
        for g in gpus_options
    ]
    best = max(runs, key=lambda r: r["updates_per_s"])
    tried = {
        (f"gpu={r['client_gpus']:g}" if r["client_gpus"] else r["client_cpus"]): r["updates_per_s"]
        for r in runs
    }
    return {**best, "tried": tried}
