"""Shared fixtures: one Ray per test session, small engine configs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from simulator.config.sections import Config, build_config

# A run small enough for a unit test: digits (8x8), 10 clients, 4 per round, 1 local epoch.
SMALL: dict[str, Any] = {
    "backend": "local",
    "dataset": "digits",
    "num_clients": 10,
    "clients_per_round": 4,
    "rounds": 3,
    "local_epochs": 1,
    "batch_size": 16,
    "hidden": 16,
    "progress": False,
    "plots": False,
}


def small_config(out_dir: Path | None = None, **overrides: Any) -> Config:
    """A tiny local-backend config; ``out`` is ``out_dir`` when given."""
    flat = dict(SMALL)
    if out_dir is not None:
        flat["out"] = str(out_dir)
    flat.update(overrides)
    return build_config(flat=flat)


def run_records(cfg: Config) -> list[Any]:
    """Run a whole simulation of ``cfg`` and return its round records (the executor is closed)."""
    from simulator.round.engine import Simulation

    sim = Simulation(cfg)
    try:
        return sim.run()
    finally:
        sim.close()


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., Config]:
    """Factory: ``make_config(name, **overrides)`` -> small config writing to tmp_path/name."""

    def make(name: str = "run", **overrides: Any) -> Config:
        return small_config(tmp_path / name, **overrides)

    return make


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """One local Ray for the whole test session (starting Ray costs seconds)."""
    from actors.ray_setup import ensure_ray

    ensure_ray(num_cpus=2)
    import ray

    yield None
    ray.shutdown()


@pytest.fixture()
def one_thread() -> object:
    """torch on one intra-op thread, as each CPU Ray actor is (the in-process workers keep the
    process's threads, and a multithreaded product may split its sum by its shape)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
