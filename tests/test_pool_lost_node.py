"""A Ray node lost with a dead actor: the replacement's start-up keeps looking at the cluster's
nodes and stops the run as soon as the alive ones cannot hold the pool, with the flags a resume
needs; on a fake Ray whose node list changes while the replacement waits.

Found at stop 52: with the worker node's raylet killed (Ray marks the node dead ~30 s later),
the pool looked at the nodes once, while the node was still listed alive, then waited the whole
START_WAIT_S (300 s) for a replacement that could not start, and stopped saying "their
resources fit the cluster's totals" with a resume line lacking ``--num-actors 1``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import ray.exceptions

from actors import startup
from actors.kinds import ActorKind
from actors.pool import RayPool
from actors.startup import ClusterLost


class _Call:
    def remote(self, *args: Any) -> str:
        return "ref"


class _Actor:
    node_id = configure = _Call()


class _FakeRay:
    """The Ray calls a replacement makes: its first call never answers; ``nodes()`` lists two
    1-CPU nodes, the second of them dead from the ``dead_after``-th look on."""

    exceptions = ray.exceptions

    def __init__(self, dead_after: int) -> None:
        self.looks = 0
        self.dead_after = dead_after
        self.killed = 0

    def nodes(self) -> list[dict[str, Any]]:
        self.looks += 1
        return [
            {"NodeID": "a" * 56, "Alive": True, "Resources": {"CPU": 1.0}},
            {"NodeID": "b" * 56, "Alive": self.looks < self.dead_after, "Resources": {"CPU": 1.0}},
        ]

    def wait(self, refs: list[Any], num_returns: int, timeout: float) -> tuple[list, list]:
        time.sleep(min(timeout, 0.01))
        return [], refs

    def kill(self, actor: Any, no_restart: bool = True) -> None:
        self.killed += 1


def _pool(fake: _FakeRay) -> RayPool:
    """A 2-actor CPU pool on ``fake``, built without starting anything."""
    pool = RayPool.__new__(RayPool)
    pool._ray = fake
    pool._kinds = [ActorKind("cpu", "cpu", 2, 1, 0.0)] * 2
    pool.num_workers = 2
    pool.actors = [_Actor(), _Actor()]
    pool._nodes = ["a" * 56, "b" * 56]
    pool.restarts = 0
    pool._start = lambda kind, node=None: _Actor()  # type: ignore[method-assign]
    return pool


def test_a_node_marked_dead_while_the_replacement_waits_stops_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The second node is still alive at the first look and dead from the third: ClusterLost
    long before START_WAIT_S, saying the node was lost, with ``--num-actors 1``; the pool is
    shut down (its actors killed)."""
    monkeypatch.setattr(startup, "START_WAIT_S", 5.0)
    monkeypatch.setattr(startup, "CHECK_EVERY_S", 0.02)
    fake = _FakeRay(dead_after=3)
    pool = _pool(fake)
    t0 = time.monotonic()
    with pytest.raises(ClusterLost) as err:
        pool._replace(1, ())
    assert time.monotonic() - t0 < 2.5
    assert str(err.value) == (
        "actor 1 died with its node, and the Ray cluster left (1 node(s), 1 CPUs) cannot hold "
        "the pool's 2 actors"
    )
    assert err.value.flags == ["--num-actors", "1"]
    assert fake.looks == 4 and fake.killed == 2 and pool.actors == []  # 3 checks, 1 count


def test_a_node_lost_past_the_wait_still_names_the_resume_flags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Looks every 10 s over a wait of 0.1 s: the one look made when the wait runs out finds the
    node dead, and says so (not "their resources fit the cluster's totals")."""
    monkeypatch.setattr(startup, "START_WAIT_S", 0.1)
    monkeypatch.setattr(startup, "CHECK_EVERY_S", 10.0)
    pool = _pool(_FakeRay(dead_after=2))
    with pytest.raises(ClusterLost, match="died with its node") as err:
        pool._replace(0, ())
    assert err.value.flags == ["--num-actors", "1"]


def test_a_replacement_on_a_cluster_that_still_holds_the_pool_waits_it_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No node lost (another holder keeps the CPU): the wait runs out after START_WAIT_S, and
    the line says no replacement started (looked at several times on the way)."""
    monkeypatch.setattr(startup, "START_WAIT_S", 0.3)
    monkeypatch.setattr(startup, "CHECK_EVERY_S", 0.05)
    fake = _FakeRay(dead_after=10**9)
    with pytest.raises(ClusterLost, match=r"no replacement started: .* within 0.3 s") as err:
        _pool(fake)._replace(1, ())
    assert err.value.flags == [] and fake.looks >= 4
