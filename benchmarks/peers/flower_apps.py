"""The child side of the Flower peer (``benchmarks/peers/flower_peer.py``): the Flower client and
server apps, and the simulation that the fresh child interpreter runs (:func:`child_main`).

Client data is a temporary ``.npz`` written by the parent; each Ray actor process loads it once
and looks clients up by their ``partition-id``, so only weights and a small config travel in
messages. ``flwr`` is imported lazily, after the offline environment is set.
"""

from __future__ import annotations

import functools
import os
import pickle
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

# No usage stats / telemetry, and a dead proxy so nothing can reach the network.
OFFLINE_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
    "FLWR_TELEMETRY_ENABLED": "0",
    **{k: "http://127.0.0.1:9" for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")},
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
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    generator: torch.Generator,
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


def _client_train(
    msg: Any,
    context: Any,
    *,
    model_fn: Callable[[], nn.Module],
    data_path: str,
    device: str = "cpu",
) -> Any:
    """Flower ``@app.train()`` handler: local SGD from the received global weights, on
    ``device`` (``"cuda"`` when the client holds a GPU share; weights travel on the CPU)."""
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

    torch.set_num_threads(1)
    partition = int(context.node_config["partition-id"])
    x, y = _client_tensors(data_path, partition)
    x, y = x.to(device), y.to(device)
    cfg = msg.content["config"]
    model = model_fn().to(device)
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    seed = np.random.SeedSequence([int(cfg["seed"]), int(cfg["server-round"]), partition])
    gen = torch.Generator().manual_seed(int(seed.generate_state(1)[0]))
    seen = local_sgd(
        model,
        x,
        y,
        epochs=int(cfg["epochs"]),
        batch_size=int(cfg["batch-size"]),
        lr=float(cfg["lr"]),
        generator=gen,
    )
    metrics = MetricRecord({"num-examples": len(x), "samples-processed": seen})
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    content = RecordDict({"arrays": ArrayRecord(state), "metrics": metrics})
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
                int(m.content["metrics"]["samples-processed"]) for m in ok
            )
            return out

    return TimedFedAvg(**kwargs)


def _server_main(
    grid: Any,
    context: Any,
    *,
    spec: dict[str, Any],
    model_fn: Callable[[], nn.Module],
    log: dict[str, Any],
) -> None:
    """Flower ``@app.main()``: run FedAvg for ``spec["rounds"]`` rounds and check the result."""
    import random

    from flwr.app import ArrayRecord, ConfigRecord

    random.seed(spec["seed"])  # Flower's node sampling uses the ``random`` module
    torch.manual_seed(spec["seed"])
    model = model_fn()
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
    n, k = spec["num_clients"], spec["clients_per_round"]
    strategy = _timed_fedavg(
        log,
        fraction_train=k / n,
        fraction_evaluate=0.0,
        min_train_nodes=k,
        min_evaluate_nodes=0,
        min_available_nodes=n,
    )
    train_config = ConfigRecord(
        {
            "lr": float(spec["lr"]),
            "epochs": spec["epochs"],
            "batch-size": spec["batch_size"],
            "seed": spec["seed"],
        }
    )
    result = strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(model.state_dict()),
        num_rounds=spec["rounds"],
        timeout=ROUND_TIMEOUT_S,
        train_config=train_config,
    )
    final = result.arrays.to_torch_state_dict()
    if not final:  # no round produced an aggregate (all client updates failed)
        return
    model.load_state_dict(final, strict=True)  # raises if names or shapes are off
    log["final_weights_ok"] = all(
        bool(torch.isfinite(t).all()) for t in final.values() if t.is_floating_point()
    ) and any(not torch.equal(final[name], t) for name, t in initial.items())


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
    gpus = float(spec.get("client_gpus", 0.0))
    client_app.train()(
        functools.partial(
            _client_train,
            model_fn=model_fn,
            data_path=spec["data_path"],
            device="cuda" if gpus > 0 else "cpu",
        )
    )
    server_app = ServerApp()
    server_app.main()(functools.partial(_server_main, spec=spec, model_fn=model_fn, log=log))
    backend_config = {
        "client_resources": {"num_cpus": float(spec["client_cpus"]), "num_gpus": gpus},
        "init_args": {
            "address": "local",
            "include_dashboard": False,
            "num_gpus": torch.cuda.device_count() if gpus > 0 else 0,
            "object_store_memory": OBJECT_STORE_BYTES,
            "logging_level": "ERROR",
            "log_to_driver": False,
        },
    }
    t_sim = time.perf_counter()
    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=spec["num_clients"],
        backend_name="ray",
        backend_config=backend_config,
        verbose_logging=False,
    )
    t_done = time.perf_counter()
    first, last = spec["warmup_rounds"] + 1, spec["rounds"]
    if sum(log["failures"].values()) or last not in log["end"]:
        raise RuntimeError(f"Flower rounds incomplete; failed updates: {log['failures']}")
    timed = range(first, last + 1)
    seconds = log["end"][last] - log["start"][first]
    updates = sum(log["updates"][r] for r in timed)
    samples = sum(log["samples"][r] for r in timed)
    return {
        "rounds_timed": len(timed),
        "seconds": seconds,
        "client_updates": updates,
        "samples": samples,
        "updates_per_s": updates / seconds,
        "samples_per_s": samples / seconds,
        "client_cpus": float(spec["client_cpus"]),
        "client_gpus": gpus,
        "final_weights_ok": bool(log.get("final_weights_ok", False)),
        "startup_s": log["start"][first] - t_sim,
        "round_s": [log["end"][r] - log["start"][r] for r in timed],
        "imports_s": t_sim - t_enter,
        "shutdown_s": t_done - log["end"][last],
    }


def child_main(workdir: str) -> None:
    """Child-process entry point: run ``job.pkl`` from ``workdir``, write ``result.pkl``."""
    with open(os.path.join(workdir, "job.pkl"), "rb") as fh:
        spec, model_fn = pickle.load(fh)
    with open(os.path.join(workdir, "result.pkl"), "wb") as fh:
        pickle.dump(_simulate(spec, model_fn), fh)
