"""Executors: where a round's training requests run.

:class:`RayPool` keeps one :class:`~actors.trainer.ClientTrainer` actor per CPU (or GPU share).
The training set and the client data source go to the object store once; the global model once
per round. Results are collected as actors finish (``ray.wait``). When an actor dies mid-round its
clients re-run on the surviving actors and a replacement actor is started for later rounds. Each
actor reports the Ray node it runs on once, when it starts (:meth:`RayPool.actor_nodes`).
:class:`LocalExecutor` runs the same trainer in this process (small rounds, tests, debugging).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from actors.trainer import ClientTrainer, ClientTransform, TrainRequest
from simulator.config import ConfigError
from simulator.data.clients import ClientData
from simulator.models import ModelSpec

log = logging.getLogger("fedsentry.actors")

INLINE_BYTES = 100 * 1024  # Ray's default max_direct_call_object_size
PER_CLIENT = ("client_ids", "losses", "steps", "num_samples", "finite")


def expand(part: dict[str, Any]) -> dict[str, Any]:
    """A worker's compact answer (per-client numbers in one ``meta`` array: id, loss, steps,
    samples, finite, returned) as named per-client fields."""
    m = part["meta"]
    ids = m[:, 0].astype(np.int64)
    return {"client_ids": ids, "losses": m[:, 1].astype(np.float32),
            "steps": m[:, 2].astype(np.int64), "num_samples": m[:, 3].astype(np.int64),
            "finite": m[:, 4] > 0, "row_ids": ids[m[:, 5] > 0], "rows": part["rows"],
            "sum": part["sum"], "sum_weight": part["sum_weight"],
            "outputs": part.get("outputs", {}), "local": part.get("local"),
            "seconds": part["seconds"]}


def merge_results(parts: list[dict[str, Any]], order: list[int]) -> dict[str, Any]:
    """Combine the workers' answers.

    Per-client fields (``client_ids``, ``losses``, ``steps``, ``num_samples``, ``finite``,
    ``outputs``, ``local``) are reordered to follow ``order``; returned rows (``row_ids``,
    ``rows``) likewise; partial sums are added (``sum``, ``sum_weight``); ``seconds`` is the
    slowest worker's training time; ``chunks`` has one entry per answer (see
    :func:`chunk_timings`).
    """
    parts = [expand(p) for p in parts if len(p["meta"])]
    if not parts:
        out: dict[str, Any] = {k: np.zeros(0, np.int64) for k in PER_CLIENT}
        out.update(row_ids=np.zeros(0, np.int64), rows=None, sum=None, sum_weight=0.0,
                   outputs={}, local=None, seconds=0.0, chunks=[])
        return out
    chunks = chunk_timings(parts)
    if len(parts) == 1 and parts[0]["client_ids"].tolist() == list(order):
        return {**parts[0], "chunks": chunks}
    ids = np.concatenate([p["client_ids"] for p in parts])
    if ids.tolist() == list(order):   # the usual case: answers in request order, no reordering
        perm = slice(None)
    else:
        pos = {int(c): i for i, c in enumerate(ids)}
        perm = np.array([pos[c] for c in order], dtype=np.int64)
    out = {k: np.concatenate([p[k] for p in parts])[perm] for k in PER_CLIENT}
    out["outputs"] = {k: np.concatenate([p["outputs"][k] for p in parts])[perm]
                      for k in parts[0]["outputs"]}
    out["local"] = (None if parts[0]["local"] is None
                    else np.concatenate([p["local"] for p in parts])[perm])
    row_ids = np.concatenate([p["row_ids"] for p in parts])
    rows = [p["rows"] for p in parts if len(p["row_ids"])]
    if rows:
        rank = {c: i for i, c in enumerate(order)}
        rperm = np.argsort([rank[int(c)] for c in row_ids], kind="stable")
        out["row_ids"], out["rows"] = row_ids[rperm], np.concatenate(rows)[rperm]
    else:
        out["row_ids"], out["rows"] = row_ids, None
    sums = [p["sum"] for p in parts if p["sum"] is not None]
    out["sum"] = np.sum(sums, axis=0) if sums else None
    out["sum_weight"] = float(sum(p["sum_weight"] for p in parts))
    out["seconds"] = max(float(p["seconds"]) for p in parts)
    out["chunks"] = chunks
    return out


def chunk_timings(parts: list[dict[str, Any]]) -> list[dict[str, float | int]]:
    """What each worker trained as one stacked chunk and how long it took: clients, the longest
    and the total local steps, samples, wall seconds (the runtime a placement must predict)."""
    return [{"clients": len(p["client_ids"]), "max_steps": int(p["steps"].max()),
             "steps": int(p["steps"].sum()), "samples": int(p["num_samples"].sum()),
             "seconds": round(float(p["seconds"]), 6)} for p in parts]


class PoolTrainer(ClientTrainer):
    """The trainer as a pool actor: it can also say which Ray node it runs on."""

    def node_id(self) -> str:
        """The hex id of the Ray node hosting this actor."""
        import ray

        return ray.get_runtime_context().get_node_id()


class LocalExecutor:
    """Runs every request in this process, one after another."""

    def __init__(self, model_spec: ModelSpec, x: np.ndarray, y: np.ndarray,
                 clients: ClientData, transform: ClientTransform | None = None,
                 num_workers: int = 1) -> None:
        self.trainer = ClientTrainer(model_spec, x, y, clients, transform, threads=None)
        self.num_workers = num_workers

    def configure(self, *settings: Any) -> None:
        self.trainer.configure(*settings)

    def actor_nodes(self) -> list[str]:
        """Always empty: there are no actors, every request runs in this process."""
        return []

    def run(self, requests: list[TrainRequest], global_flat: np.ndarray,
            shared: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
        order = [t.client_id for r in requests for t in r.tasks]
        parts = [self.trainer.train(global_flat, r, shared) for r in requests if r.tasks]
        return merge_results(parts, order)

    def shutdown(self) -> None:
        pass


class RayPool:
    """A pool of Ray device actors.

    Parameters
    ----------
    num_actors : pool size.
    gpus_per_actor : fractional GPU share per actor (0: CPU actors, one thread each).
    """

    def __init__(self, model_spec: ModelSpec, x: np.ndarray, y: np.ndarray,
                 clients: ClientData, num_actors: int, gpus_per_actor: float = 0.0,
                 transform: ClientTransform | None = None) -> None:
        import ray

        self._ray = ray
        res = ray.cluster_resources()
        cpus, gpus = float(res.get("CPU", 0.0)), float(res.get("GPU", 0.0))
        # an actor that cannot be scheduled would wait forever: refuse up front
        if num_actors > cpus:
            raise ConfigError(f"execution.num_actors: {num_actors} actors need {num_actors} "
                              f"CPUs; the Ray cluster has {cpus:g}")
        if gpus_per_actor > 0 and num_actors * gpus_per_actor > gpus + 1e-9:
            raise ConfigError(f"execution.gpus_per_actor: {num_actors} actors x "
                              f"{gpus_per_actor:g} GPU exceed the cluster's {gpus:g} GPUs")
        self.num_workers = num_actors
        self._args = (model_spec, ray.put(x), ray.put(y), ray.put(clients), transform)
        self._gpus = gpus_per_actor
        self.actors = [self._start() for _ in range(num_actors)]
        # the start-up call that waits for the actors also tells where each one runs
        self._nodes: list[str] = ray.get([a.node_id.remote() for a in self.actors])
        self.restarts = 0
        self._settings: tuple[Any, ...] | None = None

    def _start(self) -> Any:
        cls = self._ray.remote(PoolTrainer)
        device = "cuda" if self._gpus > 0 else "cpu"
        return cls.options(num_cpus=1, num_gpus=self._gpus, max_restarts=0).remote(
            *self._args, threads=1, device=device)

    def configure(self, *settings: Any) -> None:
        """Send the round-invariant settings to every actor (replacing any found dead)."""
        ray = self._ray
        refs = [a.configure.remote(*settings) for a in self.actors]
        for i, ref in enumerate(refs):
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError:
                log.warning("actor %d died before training; starting a replacement", i)
                self._replace(i, settings)
        self._settings = settings

    def actor_nodes(self) -> list[str]:
        """The hex id of the Ray node each actor runs on, in actor order (as reported when the
        actor started: a replacement reports its own; a killed, not yet replaced actor keeps
        its last)."""
        return list(self._nodes)

    def _replace(self, i: int, settings: tuple[Any, ...]) -> None:
        a = self.actors[i] = self._start()
        _, self._nodes[i] = self._ray.get([a.configure.remote(*settings), a.node_id.remote()])
        self.restarts += 1

    def run(self, requests: list[TrainRequest], global_flat: np.ndarray,
            shared: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
        """Run ``requests[i]`` on actor ``i``; when an actor dies, the others' results are
        collected as they finish and the dead actor's clients re-run on them."""
        ray = self._ray
        if self._settings is None:
            raise RuntimeError("RayPool.configure must be called before run")
        order = [t.client_id for r in requests for t in r.tasks]
        g = np.asarray(global_flat)
        # above Ray's inline limit the model goes to the object store once per round; below it,
        # it travels inside the call, which is faster than a put
        gref = ray.put(g) if g.nbytes > INLINE_BYTES else g
        sref = ray.put(shared) if shared else None
        pending = {self.actors[i].train.remote(gref, r, sref): (i, r)
                   for i, r in enumerate(requests) if r.tasks}
        try:  # the usual case: every actor answers (one call for all of them)
            return merge_results(ray.get(list(pending)), order)
        except ray.exceptions.RayActorError:
            pass
        parts: list[dict[str, Any]] = []
        while pending:  # an actor died: collect the others as they finish, re-run its clients
            done, _ = ray.wait(list(pending), num_returns=1)
            ref = done[0]
            i, req = pending.pop(ref)
            try:
                parts.append(ray.get(ref))
            except ray.exceptions.RayActorError as e:
                log.warning("actor %d died (%s); re-running its %d clients elsewhere", i,
                            type(e).__name__, len(req.tasks))
                self._replace(i, self._settings)
                busy = {j for j, _ in pending.values()}
                alive = [j for j in range(len(self.actors)) if j not in busy] or [i]
                split = np.array_split(np.arange(len(req.tasks)), len(alive))
                for j, keep in zip(alive, split, strict=True):
                    if len(keep):
                        sub = req.subset(keep.tolist())
                        pending[self.actors[j].train.remote(gref, sub, sref)] = (j, sub)
        return merge_results(parts, order)

    def kill(self, i: int) -> None:
        """Kill actor ``i`` (fault injection for tests and studies); returns once it is gone
        (``ray.kill`` is asynchronous: a call made right after it could still be served)."""
        self._ray.kill(self.actors[i], no_restart=True)
        for _ in range(200):
            try:
                self._ray.get(self.actors[i].node_id.remote(), timeout=5)
            except self._ray.exceptions.RayActorError:
                return
            time.sleep(0.05)

    def shutdown(self) -> None:
        for a in self.actors:
            self._ray.kill(a, no_restart=True)
        self.actors, self._nodes = [], []
