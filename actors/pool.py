"""Executors: where a round's training requests run.

:class:`RayPool` keeps :class:`~actors.trainer.ClientTrainer` actors of one or more kinds
(:class:`~actors.kinds.ActorKind`: threads, GPU share, a node resource label; by default one CPU
actor per CPU, or one per GPU share). The training set and the client data source go to the
object store once; the global model once per round. Results are collected as actors finish
(``ray.wait``) and merged in request order. When an actor dies mid-round its clients re-run on
the idle actors (split evenly, or as a ``replace`` callback places them) and a replacement of
the same kind is started. Each actor reports the Ray node it runs on once, when it starts
(:meth:`RayPool.actor_nodes`). :class:`actors.local.LocalExecutor` runs the same trainer in
this process (small rounds, tests, debugging).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from actors.client_inputs import ClientTransform
from actors.kinds import ActorKind, check_schedulable, total_demand
from actors.merge import merge_results
from actors.replace import Replace, regroup
from actors.request import TrainRequest
from actors.startup import ClusterLost, started, wait_for_free
from actors.trainer import ClientTrainer
from simulator.config.fields import ConfigError
from simulator.data.clients import ClientData
from simulator.training.models import ModelSpec

log = logging.getLogger("fedsentry.actors")

INLINE_BYTES = 100 * 1024  # Ray's default max_direct_call_object_size


class PoolTrainer(ClientTrainer):
    """The trainer as a pool actor: it can also say which Ray node it runs on."""

    def node_id(self) -> str:
        """The hex id of the Ray node hosting this actor."""
        import ray

        return ray.get_runtime_context().get_node_id()


class RayPool:
    """A pool of Ray device actors.

    Parameters
    ----------
    num_actors : pool size without ``kinds`` (with them: 0, or their total count).
    gpus_per_actor : fractional GPU share per actor without ``kinds`` (0: CPU actors, one
        thread each).
    kinds : actor kinds; the pool is each kind's ``count`` actors, kind after kind. None: one
        kind, named "gpu" when ``gpus_per_actor > 0`` else "cpu".
    """

    def __init__(
        self,
        model_spec: ModelSpec | Sequence[ModelSpec],
        x: np.ndarray,
        y: np.ndarray,
        clients: ClientData,
        num_actors: int,
        gpus_per_actor: float = 0.0,
        transform: ClientTransform | None = None,
        kinds: Sequence[ActorKind] | None = None,
    ) -> None:
        import ray

        self._ray = ray
        if kinds:
            kinds = list(kinds)
            total = sum(k.count for k in kinds)
            if num_actors not in (0, total):
                raise ValueError(
                    f"RayPool: num_actors={num_actors} but the kinds hold {total} "
                    "actors (give 0 with kinds)"
                )
            # an actor that cannot be scheduled would wait forever: refuse up front; and place
            # each actor where a packing puts it (Ray alone, one actor at a time, can fragment
            # the nodes: a pool that fits would then wait for a place that never frees)
            pins = check_schedulable(kinds, ray.nodes())
        else:
            res = ray.cluster_resources()
            cpus, gpus = float(res.get("CPU", 0.0)), float(res.get("GPU", 0.0))
            if num_actors > cpus:
                raise ConfigError(
                    f"execution.num_actors: {num_actors} actors need "
                    f"{num_actors} CPUs; the Ray cluster has {cpus:g}"
                )
            if gpus_per_actor > 0 and num_actors * gpus_per_actor > gpus + 1e-9:
                raise ConfigError(
                    f"execution.gpus_per_actor: {num_actors} actors x "
                    f"{gpus_per_actor:g} GPU exceed the cluster's {gpus:g} GPUs"
                )
            device = "gpu" if gpus_per_actor > 0 else "cpu"
            kinds = [ActorKind(device, device, num_actors, 1, float(gpus_per_actor))]
            pins = [None] * num_actors
        self._kinds = [k for k in kinds for _ in range(k.count)]
        self.num_workers = len(self._kinds)
        wait_for_free(total_demand(kinds), ray.available_resources)
        self._args = (model_spec, ray.put(x), ray.put(y), ray.put(clients), transform)
        self.actors = [self._start(k, node) for k, node in zip(self._kinds, pins, strict=True)]
        # the start-up call that waits for the actors also tells where each one runs
        self._nodes: list[str] = started(
            ray,
            [a.node_id.remote() for a in self.actors],
            [k.name for k in self._kinds],
            self.shutdown,
        )
        self.restarts = 0
        self._settings: tuple[Any, ...] | None = None

    def _start(self, kind: ActorKind, node: str | None = None) -> Any:
        """Start one actor of ``kind``, on ``node`` (a NodeID) when given: a soft affinity, so
        that Ray places it elsewhere if that node is gone or could never hold it, and waits
        for the node's resources otherwise (a replacement is started without one: its actor's
        node may be the one that was lost)."""
        cls = self._ray.remote(PoolTrainer)
        opts = {**kind.ray_options(), "max_restarts": 0}
        if node is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=True)
        return cls.options(**opts).remote(
            *self._args, threads=kind.threads, device=kind.torch_device
        )

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

    def kinds(self) -> list[str]:
        """The kind name of each actor, in actor order."""
        return [k.name for k in self._kinds]

    def _replace(self, i: int, settings: tuple[Any, ...]) -> None:
        """Start a replacement for the dead actor ``i``; :class:`ClusterLost` when the cluster's
        alive nodes can no longer hold the pool (looked at before, and every few seconds while
        the replacement starts: Ray marks a lost node dead ~30 s after it went), or when the
        cluster fails."""
        ray, kind = self._ray, self._kinds[i]
        try:
            self._fits(i)
            a = self.actors[i] = self._start(kind)
            # the replacement waits for its resources like the pool's first actors did: a node
            # lost with the dead actor must not leave the run hanging on an unplaceable actor
            self._nodes[i] = started(
                ray, [a.node_id.remote()], [kind.name], self.shutdown, i, lambda: self._fits(i)
            )[0]
            ray.get(a.configure.remote(*settings))
        except ConfigError as e:
            raise ClusterLost(f"actor {i} died and no replacement started: {e}") from None
        except ray.exceptions.RayError as e:
            raise ClusterLost(f"actor {i} died and the Ray cluster failed: {_first(e)}") from None
        self.restarts += 1

    def _fits(self, i: int) -> None:
        """:class:`ClusterLost` (with the resume flags) unless the alive nodes hold the pool."""
        try:
            check_schedulable(list({k.name: k for k in self._kinds}.values()), self._ray.nodes())
        except ConfigError:
            raise self._lost(i) from None

    def _lost(self, i: int) -> ClusterLost:
        """Actor ``i`` died and the alive nodes cannot hold the pool: what to resume with."""
        alive = [n for n in self._ray.nodes() if n.get("Alive")]
        cpus = sum(float(n.get("Resources", {}).get("CPU", 0.0)) for n in alive)
        fit = ""
        if len({k.name for k in self._kinds}) == 1:  # one kind: how many of it the CPUs hold
            per = self._kinds[0].demand().get("CPU", 1.0) or 1.0
            if int(cpus // per) >= 1:
                fit = str(int(cpus // per))
        return ClusterLost(
            f"actor {i} died with its node, and the Ray cluster left ({len(alive)} node(s), "
            f"{cpus:g} CPUs) cannot hold the pool's {len(self._kinds)} actors",
            ["--num-actors", fit] if fit else [],
        )

    def run(
        self,
        requests: list[TrainRequest],
        global_flat: np.ndarray,
        shared: dict[str, np.ndarray] | None = None,
        replace: Replace | None = None,
    ) -> dict[str, Any]:
        """Run ``requests[i]`` on actor ``i``, collecting answers as they finish.

        When an actor dies, a replacement of its kind is started and its clients re-run on the
        candidate actors (idle ones, the replacement included): ``replace(tasks, candidates)``
        gives one group per candidate; None splits the tasks evenly in order. Each answer is
        tagged with its actor, kind and finishing time (:func:`actors.merge.chunk_timings`);
        the merge follows request order (then re-placement order), whatever order answers
        arrive in. A failure of the cluster itself (not of the training code) is
        :class:`ClusterLost`.
        """
        ray = self._ray
        try:
            return self._run(requests, global_flat, shared, replace)
        except (ClusterLost, ray.exceptions.RayTaskError):
            raise
        except ray.exceptions.RayError as e:
            raise ClusterLost(f"the Ray cluster failed mid-round: {_first(e)}") from None

    def _run(
        self,
        requests: list[TrainRequest],
        global_flat: np.ndarray,
        shared: dict[str, np.ndarray] | None,
        replace: Replace | None,
    ) -> dict[str, Any]:
        ray = self._ray
        if self._settings is None:
            raise RuntimeError("RayPool.configure must be called before run")
        order = [t.client_id for r in requests for t in r.tasks]
        g = np.asarray(global_flat)
        # above Ray's inline limit the model goes to the object store once per round; below it,
        # it travels inside the call, which is faster than a put
        gref = ray.put(g) if g.nbytes > INLINE_BYTES else g
        sref = ray.put(shared) if shared else None
        t0 = time.perf_counter()
        pending = {
            self.actors[i].train.remote(gref, r, sref): (i, r, (i,))
            for i, r in enumerate(requests)
            if r.tasks
        }
        parts: list[tuple[tuple[int, ...], dict[str, Any]]] = []
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            i, req, key = pending.pop(done[0])
            try:
                part = ray.get(done[0])
            except ray.exceptions.RayActorError as e:
                log.warning(
                    "actor %d died (%s); re-running its %d clients elsewhere",
                    i,
                    type(e).__name__,
                    len(req.tasks),
                )
                self._replace(i, self._settings)
                busy = {j for j, _, _ in pending.values()}
                alive = [j for j in range(len(self.actors)) if j not in busy] or [i]
                if replace is None:
                    groups = [
                        s.tolist() for s in np.array_split(np.arange(len(req.tasks)), len(alive))
                    ]
                else:
                    groups = regroup(req.tasks, replace(list(req.tasks), list(alive)), len(alive))
                for n, (j, keep) in enumerate(zip(alive, groups, strict=True)):
                    if keep:
                        sub = req.subset(keep)
                        pending[self.actors[j].train.remote(gref, sub, sref)] = (j, sub, (*key, n))
                continue
            part.update(actor=i, kind=self._kinds[i].name, finished=time.perf_counter() - t0)
            parts.append((key, part))
        parts.sort(key=lambda kp: kp[0])
        return merge_results([p for _, p in parts], order)

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
        self.actors, self._nodes, self._kinds = [], [], []


def _first(e: BaseException) -> str:
    """``Type: first line`` of a Ray error."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")
