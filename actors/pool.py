"""Executors: where a round's training tasks run.

:class:`RayPool` keeps one :class:`~actors.trainer.ClientTrainer` actor per CPU (or GPU share).
The training set and client index go to the object store once; the global model once per round.
When an actor dies mid-round its tasks re-run on the surviving actors and a replacement actor is
started for later rounds. :class:`LocalExecutor` runs the same trainer in-process (tests,
debugging).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from actors.trainer import ClientTrainer, TrainTask, pack_tasks
from simulator.config import ConfigError
from simulator.models import ModelSpec
from simulator.training import LocalSpec

log = logging.getLogger("fedsentry.actors")

INLINE_BYTES = 100 * 1024  # Ray's default max_direct_call_object_size


def merge_results(parts: list[dict[str, Any]], order: list[int]) -> dict[str, Any]:
    """Combine per-actor results.

    Per-client fields (``client_ids``, ``losses``, ``steps``, ``num_samples``, ``finite``) are
    reordered to follow ``order``; returned rows (``row_ids``, ``updates``) likewise; partial sums
    of pre-aggregated rows are added (``agg_sum``, ``agg_weight``); ``seconds`` is the slowest
    actor's training time.
    """
    parts = [p for p in parts if len(p["client_ids"])]
    per_client = ("client_ids", "losses", "steps", "num_samples", "finite")
    if not parts:
        out: dict[str, Any] = {k: np.zeros(0, np.int64) for k in per_client}
        out.update(row_ids=np.zeros(0, np.int64), updates=None, agg_sum=None, agg_weight=0.0,
                   seconds=0.0)
        return out
    cat = {k: np.concatenate([p[k] for p in parts]) for k in per_client}
    pos = {int(c): i for i, c in enumerate(cat["client_ids"])}
    out = {k: v[np.array([pos[c] for c in order], dtype=np.int64)] for k, v in cat.items()}
    row_ids = np.concatenate([p["row_ids"] for p in parts])
    rows = [p["updates"] for p in parts if len(p["row_ids"])]
    if rows:
        updates = np.concatenate(rows)
        rank = {c: i for i, c in enumerate(order)}
        perm = np.argsort([rank[int(c)] for c in row_ids], kind="stable")
        out["row_ids"], out["updates"] = row_ids[perm], updates[perm]
    else:
        out["row_ids"], out["updates"] = row_ids, None
    sums = [p["agg_sum"] for p in parts if p["agg_sum"] is not None]
    out["agg_sum"] = np.sum(sums, axis=0) if sums else None
    out["agg_weight"] = float(sum(p["agg_weight"] for p in parts))
    out["seconds"] = max(float(p["seconds"]) for p in parts)
    return out


class LocalExecutor:
    """Runs every placement group in this process, one group after another."""

    def __init__(self, model_spec: ModelSpec, x: np.ndarray, y: np.ndarray,
                 client_index: list[np.ndarray], num_workers: int = 1) -> None:
        self.trainer = ClientTrainer(model_spec, x, y, client_index, threads=None)
        self.num_workers = num_workers

    def run(self, groups: list[list[TrainTask]], global_flat: np.ndarray, spec: LocalSpec,
            vectorize: bool = True, starts: dict[int, np.ndarray] | None = None
            ) -> dict[str, Any]:
        order = [t.client_id for g in groups for t in g]
        parts = [self.trainer.train(global_flat, g, spec, vectorize, starts)
                 for g in groups if g]
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
                 client_index: list[np.ndarray], num_actors: int,
                 gpus_per_actor: float = 0.0) -> None:
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
        self._args = (model_spec, ray.put(x), ray.put(y), ray.put(client_index))
        self._gpus = gpus_per_actor
        self.actors = [self._start() for _ in range(num_actors)]
        ray.get([a.ping.remote() for a in self.actors])
        self.restarts = 0
        self._settings: tuple[LocalSpec, bool] | None = None

    def _start(self) -> Any:
        cls = self._ray.remote(ClientTrainer)
        device = "cuda" if self._gpus > 0 else "cpu"
        return cls.options(num_cpus=1, num_gpus=self._gpus, max_restarts=0).remote(
            *self._args, threads=1, device=device)

    def run(self, groups: list[list[TrainTask]], global_flat: np.ndarray, spec: LocalSpec,
            vectorize: bool = True, starts: dict[int, np.ndarray] | None = None
            ) -> dict[str, Any]:
        """Run ``groups[i]`` on actor ``i``; a dead actor's tasks re-run on the others.

        ``starts`` maps clients to their own start model (only those are sent to each actor)."""
        ray = self._ray
        if self._settings != (spec, vectorize):
            self._configure_all(spec, vectorize)
        order = [t.client_id for g in groups for t in g]
        g = np.asarray(global_flat)
        # above Ray's inline limit the model goes to the object store once per round; below it,
        # it travels inside the call, which is faster than a put
        gref = ray.put(g) if g.nbytes > INLINE_BYTES else g
        def submit(i: int, g: list[TrainTask]) -> Any:
            own = {t.client_id: starts[t.client_id] for t in g if starts and
                   t.client_id in starts} or None
            return self.actors[i].train_packed.remote(gref, pack_tasks(g), own)

        pending = {i: (submit(i, g), g) for i, g in enumerate(groups) if g}
        parts: list[dict[str, Any]] = []
        while pending:
            orphans: list[TrainTask] = []
            dead: list[int] = []
            for i, (ref, g) in pending.items():
                try:
                    parts.append(ray.get(ref))
                except ray.exceptions.RayActorError as e:
                    log.warning("actor %d died (%s); re-running its %d clients elsewhere", i,
                                type(e).__name__, len(g))
                    orphans.extend(g)
                    dead.append(i)
            for i in dead:
                self.actors[i] = self._start()
                self.actors[i].configure.remote(spec, vectorize)
                self.restarts += 1
            pending = {}
            if orphans:
                alive = [i for i in range(len(self.actors)) if i not in dead] or dead
                split = np.array_split(np.arange(len(orphans)), len(alive))
                for i, rows in zip(alive, split, strict=True):
                    g = [orphans[r] for r in rows]
                    if g:
                        pending[i] = (submit(i, g), g)
        return merge_results(parts, order)

    def _configure_all(self, spec: LocalSpec, vectorize: bool) -> None:
        """Send the training settings to every actor, replacing any actor found dead."""
        ray = self._ray
        refs = [a.configure.remote(spec, vectorize) for a in self.actors]
        for i, ref in enumerate(refs):
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError:
                log.warning("actor %d died before training; starting a replacement", i)
                self.actors[i] = self._start()
                ray.get(self.actors[i].configure.remote(spec, vectorize))
                self.restarts += 1
        self._settings = (spec, vectorize)

    def kill(self, i: int) -> None:
        """Kill actor ``i`` (fault injection for tests and studies)."""
        self._ray.kill(self.actors[i], no_restart=True)

    def shutdown(self) -> None:
        for a in self.actors:
            self._ray.kill(a, no_restart=True)
        self.actors = []
