"""Actors end to end on Ray: a whole run against the local backend, the model spec's trip to an
actor, and a pool that asks for more actors than CPUs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cli_helper import run_child

from actors.merge import expand
from actors.request import TrainRequest, TrainTask
from actors.trainer import ClientTrainer
from simulator.config.sections import Config, build_config
from simulator.data.clients import PartitionData
from simulator.training.flat import FlatLayout
from simulator.training.models import ModelSpec
from simulator.training.spec import LocalSpec


def test_run_experiment_on_ray(ray_session: None, tmp_path: Path) -> None:
    from simulator.run.experiment import run_experiment
    from simulator.run.output import read_events

    flat = {
        "num_clients": 8,
        "clients_per_round": 4,
        "rounds": 2,
        "local_epochs": 1,
        "hidden": 16,
        "progress": False,
        "plots": False,
        "num_actors": 2,
        "inline": "never",  # train on the actors, not in the driver
    }
    cfg: Config = build_config(flat={**flat, "backend": "ray", "out": str(tmp_path / "ray")})
    summary = run_experiment(cfg)
    assert summary["rounds"] == 2 and summary["client_updates"] == 8
    ev = read_events(tmp_path / "ray" / "events.jsonl")
    local = build_config(flat={**flat, "backend": "local", "out": str(tmp_path / "local")})
    run_experiment(local)
    ev_local = read_events(tmp_path / "local" / "events.jsonl")
    for a, b in zip(ev, ev_local, strict=True):
        assert (a["selected"], a["virtual_time"]) == (b["selected"], b["virtual_time"])
        assert sorted(a["participants"]) == sorted(b["participants"])
        # the same bits: Ray actors run the in-process workers' code (tests/test_actor_count.py)
        assert (a["accuracy"], a["loss"], a["train_loss"]) == (
            b["accuracy"],
            b["loss"],
            b["train_loss"],
        )


def test_model_spec_travels_to_actors(ray_session: None) -> None:
    """The actor rebuilds the model from the spec: same layout size as the driver's."""
    import ray

    spec = ModelSpec("cnn", (1, 8, 8), 10, hidden=8, norm="batch")
    x = np.zeros((4, 1, 8, 8), np.float32)
    y = np.zeros(4, np.int64)
    actor = (
        ray.remote(ClientTrainer)
        .options(num_cpus=1)
        .remote(spec, x, y, PartitionData.from_lists([np.arange(4)]))
    )
    try:
        ray.get(actor.configure.remote(LocalSpec(lr=0.1, batch_size=4)))
        res = ray.get(
            actor.train.remote(
                FlatLayout(spec.build(seed=0)).flatten(spec.build(seed=0)).numpy(),
                TrainRequest([TrainTask(0, 1, 0)]),
            )
        )
        assert res["rows"].shape == (1, FlatLayout(spec.build()).size)
        assert expand(res)["steps"].tolist() == [1]
    finally:
        ray.kill(actor)


OVERSUBSCRIBE = """
import sys
import threading

import numpy as np

from actors.pool import RayPool
from actors.ray_setup import ensure_ray
from simulator.data.clients import PartitionData
from simulator.training.models import ModelSpec

ensure_ray(num_cpus=2)
spec = ModelSpec("logreg", (4,), 2)
result = {}


def build():
    try:
        RayPool(spec, np.zeros((4, 4), np.float32), np.zeros(4, np.int64),
                PartitionData.from_lists([np.arange(4)]), 3)
        result["ok"] = True
    except Exception as e:
        result["error"] = str(e)


t = threading.Thread(target=build, daemon=True)
t.start()
t.join(30)
if t.is_alive():
    print("hang: RayPool(num_actors=3) on 2 CPUs still waiting after 30 s")
    sys.exit(3)      # atexit ray.shutdown() stops this child's Ray
if "error" in result:
    print("error:", result["error"])
    sys.exit(2)
sys.exit(0)
"""


@pytest.mark.slow
def test_more_actors_than_cpus_fails_fast() -> None:
    """Runs in a child process with its own 2-CPU Ray (a hang must not block this session)."""
    proc = run_child(["-c", OVERSUBSCRIBE], timeout=120)
    out = proc.stdout
    assert proc.returncode == 2, out
    assert "num_actors" in out
