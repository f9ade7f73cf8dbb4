"""A pool of two actor kinds on Ray (2 CPUs): tags, the result against the local executor,
and a dead actor's tasks re-placed through a ``replace`` callback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from actors.kinds import parse_actor_kinds
from actors.local import LocalExecutor
from actors.pool import RayPool
from actors.request import TrainRequest, TrainTask
from simulator.data.clients import PartitionData
from simulator.training.flat import FlatLayout
from simulator.training.models import ModelSpec
from simulator.training.spec import LocalSpec

ROOT = Path(__file__).resolve().parent.parent

SPEC = ModelSpec("mlp", (4,), 2, hidden=4)
LOCAL = LocalSpec(lr=0.1, batch_size=2)
# 6 clients of 2 rows each, 4 features
X = np.arange(48, dtype=np.float32).reshape(12, 4) / 48
Y = np.array([0, 1] * 6, np.int64)
CLIENTS = PartitionData.from_lists([np.arange(2 * c, 2 * c + 2) for c in range(6)])
TASKS = [TrainTask(c, 1, 100 + c) for c in range(6)]
GROUPS = [TASKS[:3], TASKS[3:]]
GLOBAL = FlatLayout(SPEC.build(seed=0)).flatten(SPEC.build(seed=0)).numpy()


def requests() -> list[TrainRequest]:
    return [TrainRequest(list(g)) for g in GROUPS]


def local_reference() -> dict[str, Any]:
    ex = LocalExecutor(SPEC, X, Y, CLIENTS, num_workers=2)
    ex.configure(LOCAL)
    assert ex.kinds() == ["local", "local"]
    return ex.run(requests(), GLOBAL)


def assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    for k in ("client_ids", "row_ids", "steps", "num_samples"):
        assert a[k].tolist() == b[k].tolist(), k
    np.testing.assert_allclose(a["losses"], b["losses"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(a["rows"], b["rows"], rtol=0, atol=1e-5)


@pytest.fixture
def kinds_pool(ray_session: None) -> Iterator[RayPool]:
    """Kinds a and b, one CPU actor each (both of the session's CPUs)."""
    kinds = parse_actor_kinds({"b": "device=cpu,count=1", "a": "device=cpu,count=1"})
    pool = RayPool(SPEC, X, Y, CLIENTS, 0, kinds=kinds)
    pool.configure(LOCAL)
    yield pool
    pool.shutdown()


def test_local_executor_tags_chunks() -> None:
    res = local_reference()
    assert res["client_ids"].tolist() == [0, 1, 2, 3, 4, 5]
    assert [(c["actor"], c["kind"], c["clients"]) for c in res["chunks"]] == [
        (0, "local", 3),
        (1, "local", 3),
    ]
    assert all("finished" not in c for c in res["chunks"])


def test_pool_of_two_kinds(kinds_pool: RayPool) -> None:
    assert kinds_pool.kinds() == ["a", "b"] and kinds_pool.num_workers == 2
    res = kinds_pool.run(requests(), GLOBAL)
    assert_same(res, local_reference())
    chunks = res["chunks"]
    # one chunk per actor, in request order whatever order the answers came in
    assert [(c["actor"], c["kind"], c["clients"], c["samples"]) for c in chunks] == [
        (0, "a", 3, 6),
        (1, "b", 3, 6),
    ]
    for c in chunks:
        assert c["seconds"] == pytest.approx(c["end"] - c["start"], abs=2e-6)
        assert 0 <= c["start"] <= c["end"] <= c["finished"]
    with pytest.raises(ValueError, match="num_actors=3 but the kinds hold 2 actors"):
        RayPool(SPEC, X, Y, CLIENTS, 3, kinds=parse_actor_kinds({"a": "count=2"}))


def test_replace_places_a_dead_actors_tasks(kinds_pool: RayPool) -> None:
    """Actor 0 (kind a) is killed; the callback gets its 3 tasks and the candidate actors and
    puts them, reversed, on the last candidate; the result equals the no-fault one."""
    ref = local_reference()
    calls: list[tuple[list[int], list[int]]] = []

    def replace(tasks: list[TrainTask], candidates: list[int]) -> list[list[TrainTask]]:
        calls.append(([t.client_id for t in tasks], list(candidates)))
        return [[] for _ in candidates[:-1]] + [tasks[::-1]]

    kinds_pool.kill(0)
    res = kinds_pool.run(requests(), GLOBAL, replace=replace)
    assert len(calls) == 1 and calls[0][0] == [0, 1, 2]
    cands = calls[0][1]
    assert cands in ([0], [0, 1])  # actor 1 is a candidate once it has answered
    assert kinds_pool.restarts == 1 and kinds_pool.kinds() == ["a", "b"]
    assert_same(res, ref)
    last = cands[-1]
    # request 0's re-run (clients 2, 1, 0 on the last candidate) merges before request 1
    assert [(c["actor"], c["kind"], c["clients"]) for c in res["chunks"]] == [
        (last, "ab"[last], 3),
        (1, "b", 3),
    ]
    assert_same(kinds_pool.run(requests(), GLOBAL), ref)  # the replacement serves next round
