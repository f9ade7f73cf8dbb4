"""A Ray pool that cannot get its resources stops with one line instead of hanging: the wait
for free resources on hand-made numbers, and on the test session's Ray (2 CPUs) a second pool
while a first holds both CPUs."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from actors import pool as pool_module
from actors import startup
from actors.kinds import ActorKind, total_demand
from actors.pool import RayPool
from actors.startup import ClusterLost, started, wait_for_free
from simulator.config.fields import ConfigError
from simulator.data.clients import PartitionData
from simulator.training.models import ModelSpec
from simulator.training.spec import LocalSpec

SPEC = ModelSpec("mlp", (4,), 2, hidden=4)
X = np.arange(16, dtype=np.float32).reshape(4, 4) / 16
Y = np.array([0, 1, 0, 1], np.int64)
CLIENTS = PartitionData.from_lists([np.arange(0, 2), np.arange(2, 4)])


def test_wait_for_free_counts_what_is_short() -> None:
    """2 CPUs needed: 1 free at first, 2 on the third look -> returns; 1 free throughout with a
    0 s timeout -> one line naming 2 CPU (1 free); GPU short as well -> both named."""
    looks = iter([{"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 2.0}])
    wait_for_free({"CPU": 2.0}, lambda: next(looks), timeout=5.0, poll=0.0)
    with pytest.raises(ConfigError, match=r"need 2 CPU \(1 free\) after 0 s"):
        wait_for_free({"CPU": 2.0}, lambda: {"CPU": 1.0}, timeout=0.0)
    with pytest.raises(ConfigError, match=r"2 CPU \(0 free\), 0.5 GPU \(0 free\)"):
        wait_for_free({"CPU": 2.0, "GPU": 0.5}, dict, timeout=0.0)


def test_total_demand_counts_every_actor() -> None:
    """3 CPU actors of 2 threads + 2 GPU actors of 1 thread and 0.5 GPU on label 'fast':
    8 CPU, 1 GPU, 0.002 of the label (0.001 per actor)."""
    kinds = [ActorKind("c", "cpu", 3, 2, 0.0), ActorKind("g", "gpu", 2, 1, 0.5, "fast")]
    assert total_demand(kinds) == pytest.approx({"CPU": 8.0, "GPU": 1.0, "fast": 0.002})


@pytest.fixture
def full_pool(ray_session: None) -> Iterator[RayPool]:
    """Two CPU actors: both of the test session's CPUs."""
    pool = RayPool(SPEC, X, Y, CLIENTS, 2)
    pool.configure(LocalSpec(lr=0.1, batch_size=2))
    yield pool
    pool.shutdown()


def test_second_pool_on_held_cpus_is_refused(
    full_pool: RayPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second pool used to hang in its start-up call; it is refused after the wait."""
    monkeypatch.setattr(startup, "FREE_WAIT_S", 0.5)
    with pytest.raises(ConfigError, match=r"need 1 CPU \(0 free\) after 0.5 s"):
        RayPool(SPEC, X, Y, CLIENTS, 1)


def test_actor_that_cannot_start_is_refused(
    full_pool: RayPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the free-resource check (skipped here), an actor no node can place (the CPUs are
    held) is refused after START_WAIT_S with its index and kind."""
    monkeypatch.setattr(pool_module, "wait_for_free", lambda *a, **k: None)
    monkeypatch.setattr(startup, "START_WAIT_S", 0.5)
    with pytest.raises(ConfigError, match=r"did not start actor\(s\) 0 \(cpu\) within 0.5 s"):
        RayPool(SPEC, X, Y, CLIENTS, 1)


def test_replacement_that_cannot_start_is_refused(
    full_pool: RayPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Actor 1 dies and another holder takes its CPU: the replacement is refused after
    START_WAIT_S with its own index (1), not left queued forever (a fault mid-run: the run
    stops with its resume line, :class:`ClusterLost`)."""
    import ray

    @ray.remote(num_cpus=1)
    class Holder:
        def ping(self) -> int:
            return 1

    monkeypatch.setattr(startup, "START_WAIT_S", 0.5)
    full_pool.kill(1)
    holder = Holder.remote()
    try:
        assert ray.get(holder.ping.remote(), timeout=60) == 1
        with pytest.raises(
            ClusterLost,
            match=r"actor 1 died and no replacement started: .*"
            r"did not start actor\(s\) 1 \(cpu\) within 0.5 s",
        ):
            full_pool.configure(LocalSpec(lr=0.1, batch_size=2))
        assert full_pool.actors == []  # the pool was shut down, its CPU given back
    finally:
        ray.kill(holder)


def test_an_actor_whose_creation_fails_is_one_line() -> None:
    """A GPU actor on a node whose torch has no CUDA: until stop 51 torch's assertion ended the
    run in a 63-line traceback through the pool's start-up; the actor now says what is wrong
    and the start-up passes on that line (the last ``Type: text`` line of Ray's error)."""
    import torch

    from actors.trainer import ClientTrainer

    if torch.cuda.is_available():
        pytest.skip("this machine's torch has CUDA")
    with pytest.raises(RuntimeError) as err:
        ClientTrainer(SPEC, X, Y, CLIENTS, device="cuda")
    line = str(err.value)
    assert line.startswith("a GPU actor found no CUDA in torch ") and "(--gpus-per-actor 0)" in line

    class Died(Exception):
        pass

    class FakeRay:
        class exceptions:  # noqa: N801 - as ray.exceptions
            RayActorError = Died

        @staticmethod
        def wait(refs, num_returns, timeout):  # noqa: ANN001, ANN205
            return refs, []

        @staticmethod
        def get(refs):  # noqa: ANN001, ANN205
            raise Died(
                f"The actor died because of an error raised in its creation task\n"
                f"  File x.py, line 3\nray::PoolTrainer.__init__()\nRuntimeError: {line}"
            )

    gone = []
    with pytest.raises(ConfigError) as err2:
        started(FakeRay, ["r0"], ["gpu"], lambda: gone.append(1))
    assert str(err2.value) == (
        f"the Ray cluster could not start the pool's actors: RuntimeError: {line}"
    )
    assert gone == [1]  # the pool was abandoned
