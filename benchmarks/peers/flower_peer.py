"""Flower (1.41, Message API, Ray backend) peer runner for the throughput benchmark.

The simulation runs in a fresh child interpreter that starts its own local Ray instance
(``address="local"``), so it neither clashes with nor joins a Ray the caller runs. Client
data is written once to a temporary ``.npz``; each Ray actor process loads it once and
looks clients up by their ``partition-id``, so only weights and a small config travel in
messages. ``flwr`` is imported lazily, after the offline environment is set.
"""

from __future__ import annotations

import functools
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

# No usage stats / telemetry, and a dead proxy so nothing can reach the network.
OFFLINE_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0", "FLWR_TELEMETRY_ENABLED": "0",
    **{k: "http://127.0.0.1:9" for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy",
                                        "https_proxy")},
    **{k: "127.0.0.1,localhost" for k in ("NO_PROXY", "no_proxy")},
}
OBJECT_STORE_BYTES = 500 * 1024**2
ROUND_TIMEOUT_S = 1800.0

# Per-process cache (one per Ray actor): npz path -> (xs, ys) as torch tensors.
_DATA_CACHE: dict[str, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}


_SOURCE_CACHE: dict[str, tuple[np.ndarray, np.ndarray, Any]] = {}


def _client_tensors(path: str, partition: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return client ``partition``'s data, loading the whole ``.npz`` once per process.

    For a population given as a client data source (virtual clients), the ``.npz`` holds the
    pool and ``source.pkl`` beside it the source, which rebuilds the client's rows from its id
    (the same code FedSentry's actors run)."""
    src = os.path.join(os.path.dirname(path), "source.pkl")
    if os.path.exists(src):
        if path not in _SOURCE_CACHE:
            with np.load(path) as npz, open(src, "rb") as fh:
                _SOURCE_CACHE[path] = (npz["pool_x"], npz["pool_y"], pickle.load(fh))
        px, py, source = _SOURCE_CACHE[path]
        rows = source.rows([partition])
        x, y = (px, py) if rows.x is None else (rows.x, rows.y)
        return torch.from_numpy(x[rows.index[0]]), torch.from_numpy(y[rows.index[0]])
    if path not in _DATA_CACHE:
        with np.load(path) as npz:
            count = int(npz["count"])
            xs = [torch.from_numpy(npz[f"x{i}"]) for i in range(count)]
            ys = [torch.from_numpy(npz[f"y{i}"]) for i in range(count)]
        _DATA_CACHE[path] = (xs, ys)
    xs, ys = _DATA_CACHE[path]
    return xs[partition], ys[partition]


def local_sgd(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, epochs: int, batch_size: int,
    lr: float, generator: torch.Generator,
) -> int:
    """Train ``model`` in place with plain SGD on shuffled mini-batches.

    Parameters
    ----------
    model : nn.Module
        Model to train (starts from the weights it holds).
    x, y : torch.Tensor
        Client inputs and int64 labels.
    epochs, batch_size, lr : int, int, float
        Local epochs, mini-batch size (an epoch's last batch may be smaller), SGD step.
    generator : torch.Generator
        Source of the per-epoch shuffles.

    Returns
    -------
    int
        Number of training samples processed (``len(x) * epochs``).
    """
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    seen = 0
    for _ in range(epochs):
        perm = torch.randperm(len(x), generator=generator)
        for start in range(0, len(x), batch_size):
            idx = perm[start : start + batch_size]
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x[idx]), y[idx]).backward()
            opt.step()
            seen += len(idx)
    return seen


def _client_train(msg: Any, context: Any, *, model_fn: Callable[[], nn.Module],
                  data_path: str) -> Any:
    """Flower ``@app.train()`` handler: local SGD from the received global weights."""
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

    torch.set_num_threads(1)
    partition = int(context.node_config["partition-id"])
    x, y = _client_tensors(data_path, partition)
    cfg = msg.content["config"]
    model = model_fn()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    seed = np.random.SeedSequence([int(cfg["seed"]), int(cfg["server-round"]), partition])
    gen = torch.Generator().manual_seed(int(seed.generate_state(1)[0]))
    seen = local_sgd(model, x, y, epochs=int(cfg["epochs"]), batch_size=int(cfg["batch-size"]),
                     lr=float(cfg["lr"]), generator=gen)
    metrics = MetricRecord({"num-examples": len(x), "samples-processed": seen})
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics})
    return Message(content=content, reply_to=msg)


def _timed_fedavg(log: dict[str, dict[int, float]], **kwargs: Any) -> Any:
    """FedAvg that records each training round's start/end time and reply counts."""
    from flwr.serverapp.strategy import FedAvg

    class TimedFedAvg(FedAvg):  # type: ignore[misc]
        def configure_train(self, server_round: int, *args: Any, **kw: Any) -> Any:
            log["start"][server_round] = time.perf_counter()
            return super().configure_train(server_round, *args, **kw)

        def aggregate_train(self, server_round: int, replies: Any) -> Any:
            replies = list(replies)
            out = super().aggregate_train(server_round, replies)
            log["end"][server_round] = time.perf_counter()
            ok = [m for m in replies if not m.has_error()]
            log["updates"][server_round] = len(ok)
            log["failures"][server_round] = len(replies) - len(ok)
            log["samples"][server_round] = sum(
                int(m.content["metrics"]["samples-processed"]) for m in ok)
            return out

    return TimedFedAvg(**kwargs)


def _server_main(grid: Any, context: Any, *, spec: dict[str, Any],
                 model_fn: Callable[[], nn.Module], log: dict[str, Any]) -> None:
    """Flower ``@app.main()``: run FedAvg for ``spec["rounds"]`` rounds and check the result."""
    import random

    from flwr.app import ArrayRecord, ConfigRecord

    random.seed(spec["seed"])  # Flower's node sampling uses the ``random`` module
    torch.manual_seed(spec["seed"])
    model = model_fn()
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
    n, k = spec["num_clients"], spec["clients_per_round"]
    strategy = _timed_fedavg(log, fraction_train=k / n, fraction_evaluate=0.0,
                             min_train_nodes=k, min_evaluate_nodes=0, min_available_nodes=n)
    train_config = ConfigRecord({"lr": float(spec["lr"]), "epochs": spec["epochs"],
                                 "batch-size": spec["batch_size"], "seed": spec["seed"]})
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()),
                            num_rounds=spec["rounds"], timeout=ROUND_TIMEOUT_S,
                            train_config=train_config)
    final = result.arrays.to_torch_state_dict()
    if not final:  # no round produced an aggregate (all client updates failed)
        return
    model.load_state_dict(final, strict=True)  # raises if names or shapes are off
    log["final_weights_ok"] = (
        all(bool(torch.isfinite(t).all()) for t in final.values() if t.is_floating_point())
        and any(not torch.equal(final[name], t) for name, t in initial.items()))


def _simulate(spec: dict[str, Any], model_fn: Callable[[], nn.Module]) -> dict[str, Any]:
    """Child-process body: run the Flower simulation and summarise its timings."""
    t_enter = time.perf_counter()
    os.environ.update(OFFLINE_ENV)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import logging

    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    logging.getLogger("flwr").setLevel(logging.ERROR)
    torch.set_num_threads(1)
    log: dict[str, Any] = {"start": {}, "end": {}, "updates": {}, "samples": {}, "failures": {}}
    client_app = ClientApp()
    client_app.train()(functools.partial(_client_train, model_fn=model_fn,
                                         data_path=spec["data_path"]))
    server_app = ServerApp()
    server_app.main()(functools.partial(_server_main, spec=spec, model_fn=model_fn, log=log))
    backend_config = {
        "client_resources": {"num_cpus": float(spec["client_cpus"]), "num_gpus": 0.0},
        "init_args": {"address": "local", "include_dashboard": False, "num_gpus": 0,
                      "object_store_memory": OBJECT_STORE_BYTES, "logging_level": "ERROR",
                      "log_to_driver": False},
    }
    t_sim = time.perf_counter()
    run_simulation(server_app=server_app, client_app=client_app,
                   num_supernodes=spec["num_clients"], backend_name="ray",
                   backend_config=backend_config, verbose_logging=False)
    t_done = time.perf_counter()
    first, last = spec["warmup_rounds"] + 1, spec["rounds"]
    if sum(log["failures"].values()) or last not in log["end"]:
        raise RuntimeError(f"Flower rounds incomplete; failed updates: {log['failures']}")
    timed = range(first, last + 1)
    seconds = log["end"][last] - log["start"][first]
    updates = sum(log["updates"][r] for r in timed)
    samples = sum(log["samples"][r] for r in timed)
    return {
        "rounds_timed": len(timed), "seconds": seconds, "client_updates": updates,
        "samples": samples, "updates_per_s": updates / seconds,
        "samples_per_s": samples / seconds, "client_cpus": float(spec["client_cpus"]),
        "final_weights_ok": bool(log.get("final_weights_ok", False)),
        "startup_s": log["start"][first] - t_sim,
        "round_s": [log["end"][r] - log["start"][r] for r in timed],
        "imports_s": t_sim - t_enter, "shutdown_s": t_done - log["end"][last],
    }


def _child_main(workdir: str) -> None:
    """Child-process entry point: run ``job.pkl`` from ``workdir``, write ``result.pkl``."""
    with open(os.path.join(workdir, "job.pkl"), "rb") as fh:
        spec, model_fn = pickle.load(fh)
    with open(os.path.join(workdir, "result.pkl"), "wb") as fh:
        pickle.dump(_simulate(spec, model_fn), fh)


def _launch(spec: dict[str, Any], model_fn: Callable[[], nn.Module], workdir: str) -> Any:
    """Run :func:`_child_main` in a fresh interpreter that sees this process's ``sys.path``."""
    from ray import cloudpickle
    with open(os.path.join(workdir, "job.pkl"), "wb") as fh:
        cloudpickle.dump((spec, model_fn), fh)  # by value if model_fn lives in __main__
    pythonpath = os.pathsep.join(p or os.getcwd() for p in sys.path)
    env = {**os.environ, **OFFLINE_ENV, "PYTHONPATH": pythonpath}
    env.pop("RAY_ADDRESS", None)
    code = f"import importlib, sys; importlib.import_module({__name__!r})._child_main(sys.argv[1])"
    log_path = os.path.join(workdir, "child.log")
    with open(log_path, "wb") as log:
        proc = subprocess.run([sys.executable, "-c", code, workdir], env=env, stdout=log,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False)
    result_path = os.path.join(workdir, "result.pkl")
    if proc.returncode != 0 or not os.path.exists(result_path):
        with open(log_path, errors="replace") as fh:
            raise RuntimeError(f"Flower simulation failed (exit code {proc.returncode}):\n"
                               + fh.read()[-6000:])
    with open(result_path, "rb") as fh:
        return pickle.load(fh)


def run_flower(
    client_data: Sequence[tuple[np.ndarray, np.ndarray]] | tuple[np.ndarray, np.ndarray, Any],
    model_fn: Callable[[], nn.Module],
    *, rounds: int, clients_per_round: int, epochs: int, batch_size: int, lr: float,
    seed: int, client_cpus: float = 1.0, warmup_rounds: int = 1,
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
    warmup_rounds : int, default 1
        Leading rounds left out of the timing (they absorb Ray/actor start-up).

    Returns
    -------
    dict
        ``rounds_timed, seconds, client_updates, samples, updates_per_s, samples_per_s,
        client_cpus, final_weights_ok`` plus diagnostics in seconds: ``startup_s`` (from
        ``run_simulation`` to the first timed round: Ray start, actor pool, warm-up rounds),
        ``imports_s`` (child start to ``run_simulation``), ``shutdown_s`` and ``round_s``
        (list of timed rounds' durations).
    """
    virtual = (isinstance(client_data, tuple) and len(client_data) == 3
               and hasattr(client_data[2], "rows"))
    n = client_data[2].num_clients if virtual else len(client_data)
    if not 0 <= warmup_rounds < rounds:
        raise ValueError("need 0 <= warmup_rounds < rounds")
    if not 1 <= clients_per_round <= n:
        raise ValueError("need 1 <= clients_per_round <= len(client_data)")
    if min(epochs, batch_size) < 1 or client_cpus <= 0:
        raise ValueError("epochs, batch_size and client_cpus must be positive")
    with tempfile.TemporaryDirectory(prefix="flower_peer_") as tmp:
        path = os.path.join(tmp, "clients.npz")
        if virtual:
            px, py, source = client_data
            np.savez(path, pool_x=np.asarray(px, np.float32), pool_y=np.asarray(py, np.int64))
            with open(os.path.join(tmp, "source.pkl"), "wb") as fh:
                pickle.dump(source, fh)
        else:
            np.savez(path, count=np.asarray(n),
                     **{f"x{i}": np.asarray(x, np.float32)
                        for i, (x, _) in enumerate(client_data)},
                     **{f"y{i}": np.asarray(y, np.int64)
                        for i, (_, y) in enumerate(client_data)})
        spec = {"data_path": path, "num_clients": n, "rounds": rounds,
                "clients_per_round": clients_per_round, "epochs": epochs,
                "batch_size": batch_size, "lr": lr, "seed": seed,
                "client_cpus": client_cpus, "warmup_rounds": warmup_rounds}
        return _launch(spec, model_fn, tmp)


def best_flower(
    client_data: Sequence[tuple[np.ndarray, np.ndarray]], model_fn: Callable[[], nn.Module],
    *, cpus_options: Sequence[float] = (1.0, 2.0), **kwargs: Any,
) -> dict[str, Any]:
    """Run :func:`run_flower` for each ``client_cpus`` option and return the fastest.

    Parameters
    ----------
    client_data, model_fn, **kwargs
        As for :func:`run_flower` (``rounds``, ``clients_per_round``, ... but not
        ``client_cpus``).
    cpus_options : sequence of float, default (1.0, 2.0)
        ``client_cpus`` values to try.

    Returns
    -------
    dict
        The result with the highest ``updates_per_s``, plus ``"tried"``:
        ``{client_cpus: updates_per_s}`` for every option.
    """
    if not cpus_options:
        raise ValueError("cpus_options is empty")
    runs = [run_flower(client_data, model_fn, client_cpus=c, **kwargs) for c in cpus_options]
    best = max(runs, key=lambda r: r["updates_per_s"])
    return {**best, "tried": {r["client_cpus"]: r["updates_per_s"] for r in runs}}
