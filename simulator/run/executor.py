"""Building a run's executor from its config: the Ray actor pool, or the in-process trainer
that the local backend (and small rounds) use."""

from __future__ import annotations

from typing import Any

from simulator.config.sections import Config
from simulator.data.clients import ClientData
from simulator.run.federation import Federation


def actor_gpu_share(gpus_per_actor: float | None, cluster_gpus: float) -> float:
    """GPU share of each actor: the configured one (0 forces CPU actors even on a GPU
    cluster), or, unset, a quarter GPU when the cluster has GPUs and none otherwise."""
    if gpus_per_actor is None:
        return 0.25 if cluster_gpus > 0 else 0.0
    return float(gpus_per_actor)


def default_actors(nodes: list[dict[str, Any]], share: float) -> int:
    """How many actors a pool gets when ``num_actors`` is 0: one per CPU of the alive ``nodes``
    (``ray.nodes()`` entries); with GPU actors (``share`` of a GPU each, and one CPU), as many
    as each node holds of both (until stop 51 the GPU slots alone: 1 GPU at 0.25 made 4 actors
    on a node of 1 CPU, refused). At least 1."""
    n = 0
    for node in nodes:
        if not node.get("Alive", True):
            continue
        res = node.get("Resources", {})
        cpus = int(float(res.get("CPU", 0.0)) + 1e-9)
        n += min(int(float(res.get("GPU", 0.0)) / share + 1e-9), cpus) if share > 0 else cpus
    return max(1, n)


def make_executor(cfg: Config, fed: Federation, clients: ClientData | None = None):  # noqa: ANN201 (RayPool | LocalExecutor)
    """The configured executor: a Ray actor pool (default) or the in-process trainer.

    With ``execution.actor_kinds`` the pool holds those kinds (checked against the cluster
    before any actor starts; the local backend then has as many workers as the kinds have
    actors). ``clients`` overrides the federation's client source (e.g. Siren's training rows
    without the holdouts)."""
    from actors.kinds import parse_actor_kinds
    from actors.local import LocalExecutor
    from actors.pool import RayPool

    ex = cfg.execution
    clients = clients or fed.clients
    kinds = parse_actor_kinds(ex.actor_kinds) if ex.actor_kinds else None
    if ex.backend == "local":
        n = sum(k.count for k in kinds) if kinds else max(ex.num_actors, 1)
        return LocalExecutor(
            fed.specs, fed.x_train, fed.y_train, clients, fed.transform, num_workers=n
        )
    from actors.ray_setup import ensure_ray

    ensure_ray(ex.ray_address)
    if kinds:
        return RayPool(
            fed.specs,
            fed.x_train,
            fed.y_train,
            clients,
            0,
            transform=fed.transform,
            kinds=kinds,
        )
    import ray

    res = ray.cluster_resources()
    gpus = float(res.get("GPU", 0.0))
    share = actor_gpu_share(ex.gpus_per_actor, gpus)
    n = ex.num_actors or default_actors(ray.nodes(), share)
    return RayPool(fed.specs, fed.x_train, fed.y_train, clients, n, share, fed.transform)
