"""Tests for actors (trainer, local executor, Ray pool, fault handling) and the legacy placements
(merge_results: test_merge_results.py; whole runs on Ray: test_actors_end_to_end.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from actors.local import LocalExecutor
from actors.merge import expand
from actors.pool import RayPool
from actors.request import TrainRequest, TrainTask
from actors.trainer import ClientTrainer
from simulator.algorithms import make_algorithm
from simulator.config.learning import AlgorithmConfig
from simulator.config.sections import build_config
from simulator.placement.legacy import greedy, place, round_robin
from simulator.run.federation import Federation, build_federation
from simulator.training.spec import LocalSpec

# ------------------------------------------------------------------------------- placement


def tasks_with_costs(costs: list[int]) -> list[TrainTask]:
    return [TrainTask(client_id=i, epochs=1, seed=i, num_samples=c) for i, c in enumerate(costs)]


def ids(groups: list[list[TrainTask]]) -> list[list[int]]:
    return [[t.client_id for t in g] for g in groups]


def loads(groups: list[list[TrainTask]]) -> list[int]:
    return [sum(t.num_samples * t.epochs for t in g) for g in groups]


def test_greedy_lpt_by_hand() -> None:
    """LPT on costs [5, 4, 3, 3, 3], 2 actors: 5 -> a0 (5); 4 -> a1 (4); 3 -> a1 (7);
    3 -> a0 (8); 3 -> a1 (10)."""
    groups = place(tasks_with_costs([5, 4, 3, 3, 3]), 2, "greedy")
    assert ids(groups) == [[0, 3], [1, 2, 4]]
    assert loads(groups) == [8, 10]


def test_greedy_uses_samples_times_epochs() -> None:
    tasks = [TrainTask(0, 3, 0, 10), TrainTask(1, 1, 1, 25), TrainTask(2, 1, 2, 20)]
    # costs 30, 25, 20: 30 -> a0, 25 -> a1, 20 -> a1 (25 < 30)
    groups = greedy(tasks, 2)
    assert ids(groups) == [[0], [1, 2]] and loads(groups) == [30, 45]
    assert ids(greedy(tasks, 5)) == [[0], [1], [2], [], []]


def test_round_robin_and_errors() -> None:
    tasks = tasks_with_costs([5, 4, 3, 3, 3])
    assert ids(round_robin(tasks, 2)) == [[0, 2, 4], [1, 3]]
    assert ids(place(tasks, 3, "round_robin")) == [[0, 3], [1, 4], [2]]
    with pytest.raises(ValueError, match=r"unknown 'ga'; valid: \['greedy', 'round_robin'\]"):
        place(tasks, 2, "ga")
    with pytest.raises(ValueError, match="at least one actor"):
        place(tasks, 0)


def test_small_rounds_use_fewer_actors() -> None:
    tasks = tasks_with_costs([5, 4, 3, 3, 3])  # total cost 18
    # min_work 10: int(18 // 10) = 1 actor used; the other groups stay empty
    groups = place(tasks, 3, "greedy", min_work=10)
    assert ids(groups) == [[0, 1, 2, 3, 4], [], []]
    # min_work 6: 3 actors: 5 -> a0, 4 -> a1, 3 -> a2, 3 -> a2 (3 < 4 < 5), 3 -> a1
    assert ids(place(tasks, 3, "greedy", min_work=6)) == [[0], [1, 4], [2, 3]]
    assert ids(place(tasks, 3, "greedy", min_work=0)) == ids(greedy(tasks, 3))
    assert len(place(tasks[:1], 4, "round_robin", min_work=100)) == 4


# ------------------------------------------------------------------------------- trainers


@pytest.fixture(scope="module")
def fed() -> Federation:
    cfg = build_config(
        flat={
            "backend": "local",
            "num_clients": 8,
            "clients_per_round": 8,
            "hidden": 16,
            "partition": "iid",
        }
    )
    return build_federation(cfg)


SPEC = LocalSpec(
    lr=0.1,
    batch_size=16,
    weight_decay=0.001,
    step=make_algorithm(AlgorithmConfig(algorithm="fedprox", algorithm_params={"mu": 0.1})),
)
TASKS = [TrainTask(c, e, 100 + c, 0) for c, e in ((0, 2), (1, 1), (2, 2), (3, 1), (5, 1), (6, 2))]


def requests(groups: list[list[TrainTask]]) -> list[TrainRequest]:
    return [TrainRequest(g) for g in groups]


def trainer_of(fed: Federation, x: np.ndarray | None = None) -> ClientTrainer:
    t = ClientTrainer(
        fed.model_spec, fed.x_train if x is None else x, fed.y_train, fed.clients, threads=None
    )
    t.configure(SPEC, True)
    return t


def local_result(fed: Federation, groups: list[list[TrainTask]]) -> dict[str, Any]:
    ex = LocalExecutor(fed.model_spec, fed.x_train, fed.y_train, fed.clients)
    ex.configure(SPEC, True)
    return ex.run(requests(groups), fed.layout.flatten(fed.model).numpy())


def assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    for k in ("client_ids", "row_ids", "steps", "num_samples", "finite"):
        assert a[k].tolist() == b[k].tolist(), k
    np.testing.assert_allclose(a["losses"], b["losses"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(a["rows"], b["rows"], rtol=0, atol=1e-5)


def test_local_executor_fields_follow_placement_rows_come_by_client(fed: Federation) -> None:
    groups = place(TASKS, 2, "round_robin")
    res = local_result(fed, groups)
    assert res["client_ids"].tolist() == [0, 2, 5, 1, 3, 6]
    assert res["row_ids"].tolist() == [0, 1, 2, 3, 5, 6]
    assert res["num_samples"].tolist() == fed.client_sizes[[0, 2, 5, 1, 3, 6]].tolist()
    assert res["rows"].shape == (6, fed.layout.size) and res["sum"] is None
    # a client's row does not depend on which other clients share its group (client 5: row 4)
    alone = local_result(fed, [[TASKS[4]]])
    assert alone["row_ids"].tolist() == [5]
    np.testing.assert_allclose(res["rows"][4], alone["rows"][0], rtol=0, atol=1e-5)


def test_trainer_partial_sum(fed: Federation) -> None:
    """Summed tasks are added on the actor: sum = sum_k w_k u_k; the others return rows."""
    g = fed.layout.flatten(fed.model).numpy()
    trainer = trainer_of(fed)
    plain = expand(trainer.train(g, TrainRequest(TASKS[:3])))
    res = expand(
        trainer.train(
            g, TrainRequest(TASKS[:3], np.array([True, False, True]), np.array([2.0, 0.0, 0.5]))
        )
    )
    assert res["row_ids"].tolist() == [1] and res["sum_weight"] == 2.5
    np.testing.assert_allclose(res["rows"][0], plain["rows"][1], rtol=0, atol=1e-6)
    expected = 2.0 * plain["rows"][0].astype(np.float64) + 0.5 * plain["rows"][2]
    np.testing.assert_allclose(res["sum"], expected, rtol=0, atol=1e-5)


def test_trainer_partial_sum_skips_non_finite(fed: Federation) -> None:
    x = fed.x_train.copy()
    x[fed.client_index[1]] = np.nan
    trainer = trainer_of(fed, x)
    g = fed.layout.flatten(fed.model).numpy()
    plain = expand(trainer.train(g, TrainRequest(TASKS[:3])))
    assert plain["finite"].tolist() == [True, False, True]
    res = expand(trainer.train(g, TrainRequest(TASKS[:3], np.ones(3, bool), np.ones(3))))
    assert res["sum_weight"] == 2.0
    expected = plain["rows"][0].astype(np.float64) + plain["rows"][2]
    np.testing.assert_allclose(res["sum"], expected, rtol=0, atol=1e-5)


# ------------------------------------------------------------------------------- Ray pool


@pytest.fixture
def pool(ray_session: None, fed: Federation) -> Iterator[RayPool]:
    """A 2-actor pool; function-scoped because its actors hold both of the session's CPUs
    (another pool or actor could not be scheduled while it lives)."""
    p = RayPool(fed.model_spec, fed.x_train, fed.y_train, fed.clients, num_actors=2)
    p.configure(SPEC, True)
    yield p
    p.shutdown()


def test_ray_pool_equals_local(pool: RayPool, fed: Federation) -> None:
    groups = place(TASKS, 2, "greedy")
    res = pool.run(requests(groups), fed.layout.flatten(fed.model).numpy())
    ref = local_result(fed, groups)
    assert res["client_ids"].tolist() == [t.client_id for g in groups for t in g]
    assert_same(res, ref)
    assert pool.restarts == 0


class KillOnSubmit:
    """Stands in for an actor handle: a ``train*`` call is submitted to the real actor, which is
    then killed, so the actor dies with the round's task in flight.  Other calls pass through."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def __getattr__(self, name: str) -> Any:
        import ray

        method = getattr(self.handle, name)
        if not name.startswith("train"):
            return method
        handle = self.handle

        class _Method:
            @staticmethod
            def remote(*args: Any, **kw: Any) -> Any:
                ref = method.remote(*args, **kw)
                ray.kill(handle, no_restart=True)
                return ref

        return _Method()


def test_actor_killed_between_rounds(pool: RayPool, fed: Federation) -> None:
    groups = place(TASKS, 2, "greedy")
    ref = local_result(fed, groups)
    g = fed.layout.flatten(fed.model).numpy()
    assert_same(pool.run(requests(groups), g), ref)
    pool.kill(0)
    res = pool.run(requests(groups), g)
    assert pool.restarts == 1
    assert sorted(res["client_ids"].tolist()) == sorted(t.client_id for t in TASKS)
    assert_same(res, ref)
    # the replacement actor serves the next round
    again = pool.run(requests(groups), g)
    assert pool.restarts == 1
    assert_same(again, ref)


def test_actor_dead_before_first_round(pool: RayPool, fed: Federation) -> None:
    groups = place(TASKS, 2, "greedy")
    pool.kill(0)
    pool.configure(SPEC, True)  # the settings of a run's first round find the actor dead
    res = pool.run(requests(groups), fed.layout.flatten(fed.model).numpy())
    assert pool.restarts == 1
    assert_same(res, local_result(fed, groups))


def test_actor_killed_while_round_runs(pool: RayPool, fed: Federation) -> None:
    groups = place(TASKS, 2, "greedy")
    assert all(groups)
    ref = local_result(fed, groups)
    g = fed.layout.flatten(fed.model).numpy()
    pool.run(requests(groups), g)
    pool.actors[1] = KillOnSubmit(pool.actors[1])
    res = pool.run(requests(groups), g)
    assert pool.restarts == 1
    assert not isinstance(pool.actors[1], KillOnSubmit)
    assert_same(res, ref)


def test_dead_actors_tasks_go_through_the_scheduler(pool: RayPool, fed: Federation) -> None:
    """Fault re-placement asks the configured placement (here ``lpt``) where the orphaned
    tasks go; the round's result is unchanged."""
    from simulator.placement import make_placement
    from simulator.placement.runtime import Scheduler

    sched = Scheduler(make_placement("lpt"), "gbdt", 1e5, 16, seed=0)
    asked: list[tuple[list[int], list[int]]] = []

    def replace(tasks: list[TrainTask], actors: list[int]) -> list[list[TrainTask]]:
        asked.append(([t.client_id for t in tasks], actors))
        return sched.replace(tasks, ["cpu"] * len(actors), 0)

    groups = place(TASKS, 2, "greedy")
    ref = local_result(fed, groups)
    g = fed.layout.flatten(fed.model).numpy()
    pool.run(requests(groups), g)
    restarts = pool.restarts
    pool.actors[1] = KillOnSubmit(pool.actors[1])
    res = pool.run(requests(groups), g, replace=replace)
    assert pool.restarts == restarts + 1
    assert len(asked) == 1 and sorted(asked[0][0]) == sorted(t.client_id for t in groups[1])
    assert_same(res, ref)
