"""A real two-node Ray run: the actors run on both nodes and the metrics equal a one-node run's.

The study runs in a subprocess (tests/two_node_study.py): one Ray per process, and this pytest
session may already own one. That process starts a :class:`ray.cluster_utils.Cluster` (a head node
and a second node, one CPU each, so the two actors must land on different nodes), runs the study
on it through the ``python -m`` entry point with ``--ray-address``, shuts the cluster down, and
runs the same study on a one-node local Ray. The study's three tests are marked ``slow`` (~40 s of
set-up on a 2-core machine): ``.ci/run`` runs them after the default suite.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cluster_helper import helper_run

from actors.local import LocalExecutor
from actors.pool import RayPool
from simulator.data.clients import PartitionData
from simulator.training.models import ModelSpec
from simulator.training.spec import LocalSpec

ROOT = Path(__file__).resolve().parent.parent
HELPER = ROOT / "tests" / "two_node_study.py"

# ---------------------------------------------------------------------------------- the study
# A ``python -m`` command line: module, then its options (the helper adds --ray-address and
# --out). The straggler benchmark on 40 devices: deadline rounds with carry-over (max staleness
# 1, so late updates are both carried and dropped) and FedBuff (k = 3 of 8 in flight), 4 steps
# each; 2 actors and --inline never, so every round trains on the actors.
STUDY: list[str] = [
    "benchmarks.stragglers",
    "--population",
    "40",
    "--clients-per-round",
    "8",
    "--policies",
    "deadline_carryover",
    "fedbuff",
    "--seeds",
    "1",
    "--rounds",
    "4",
    "--policy-param",
    "deadline_carryover:max_staleness=1",
    "--policy-param",
    "fedbuff:k=3",
    "--set",
    "hidden=16",
    "--backend",
    "ray",
    "--num-actors",
    "2",
    "--inline",
    "never",
    "--no-progress",
    "--no-plots",
]
RUNS = ("deadline_carryover-s0", "fedbuff-s0")
# ---------------------------------------------------------------------------------------------
ROUNDS = 4
COMPARED = (
    "accuracy",
    "train_loss",
    "virtual_time",
    "participants",
    "dropped",
    "stale",
    "staleness",
    "device_seconds",
    "wasted_device_seconds",
)
TIMEOUT_S = 300


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Run the study on two nodes then one; the output directory."""
    out = tmp_path_factory.mktemp("two_node")
    with helper_run(HELPER, [str(out), *STUDY], "two-node study", TIMEOUT_S):
        yield out


def events(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]


def summary(run: Path) -> dict[str, Any]:
    return json.loads((run / "summary.json").read_text())


def results(run: Path) -> dict[str, Any]:
    return json.loads((run / "results.json").read_text())


@pytest.mark.slow
def test_actors_ran_on_both_nodes(study: Path) -> None:
    head, second = json.loads((study / "cluster_nodes.json").read_text())
    assert head != second
    s = results(study / "two_node")["settings"]
    assert s["actor_nodes"] == 2
    # one actor per node (each node has one CPU); the ids are the first 12 hex digits
    assert s["actor_node_ids"] == sorted([head[:12], second[:12]])
    one = results(study / "one_node")["settings"]
    assert one["actor_nodes"] == 1
    assert one["actor_node_ids"][0] not in (head[:12], second[:12])  # a different Ray


@pytest.mark.slow
def test_two_nodes_give_the_one_node_metrics(study: Path) -> None:
    for run in RUNS:
        two = events(study / "two_node" / "runs" / run)
        one = events(study / "one_node" / "runs" / run)
        assert [e["round"] for e in two] == [e["round"] for e in one] == list(range(ROUNDS))
        assert all(e["trained_in"] == "actors" for e in two + one)
        for a, b in zip(two, one, strict=True):
            assert {k: a[k] for k in COMPARED} == {k: b[k] for k in COMPARED}, (run, a["round"])
    # and the study's figures (everything but the wall-clock seconds)
    two = results(study / "two_node")["policies"]
    one = results(study / "one_node")["policies"]
    assert [r["policy"] for r in two] == ["deadline_carryover", "fedbuff"]
    for a, b in zip(two, one, strict=True):
        a.pop("run_seconds"), b.pop("run_seconds")
        assert a == b


@pytest.mark.slow
def test_the_study_has_stragglers(study: Path) -> None:
    """The comparison covers late updates: some are carried (stale), some dropped."""
    ev = events(study / "two_node" / "runs" / RUNS[0])
    assert sum(len(e["stale"]) for e in ev) > 0
    assert sum(len(e["dropped"]) for e in ev) > 0
    ev = events(study / "two_node" / "runs" / RUNS[1])
    assert sum(len(e["stale"]) for e in ev) > 0


# ----------------------------------------------------------------------- actor_nodes, one node

SPEC = ModelSpec("mlp", (4,), 2, hidden=4)


def tiny_pool(num_actors: int) -> RayPool:
    x = np.zeros((4, 4), np.float32)
    y = np.array([0, 1, 0, 1], np.int64)
    pool = RayPool(SPEC, x, y, PartitionData.from_lists([np.arange(4)]), num_actors)
    pool.configure(LocalSpec(lr=0.1, batch_size=4))
    return pool


def test_ray_pool_reports_actor_nodes(ray_session: None) -> None:
    import ray

    here = ray.get_runtime_context().get_node_id()
    pool = tiny_pool(2)
    try:
        assert pool.actor_nodes() == [here, here]
        pool.actor_nodes()[0] = "changed"  # a copy: the pool's record is untouched
        pool._nodes[0] = "elsewhere"  # pretend actor 0 ran on another node, then kill it
        pool.kill(0)
        pool.configure(LocalSpec(lr=0.1, batch_size=4))  # finds it dead, starts a replacement
        assert pool.restarts == 1
        assert pool.actor_nodes() == [here, here]  # the replacement reported its own node
    finally:
        pool.shutdown()
    assert pool.actor_nodes() == []


def test_local_executor_has_no_actor_nodes() -> None:
    x = np.zeros((4, 4), np.float32)
    ex = LocalExecutor(
        SPEC, x, np.zeros(4, np.int64), PartitionData.from_lists([np.arange(4)]), num_workers=3
    )
    assert ex.actor_nodes() == []


def test_summary_has_no_actor_nodes_without_actors(make_config: Any) -> None:
    from simulator.run.experiment import run_experiment

    s = run_experiment(make_config(rounds=1))  # local backend: no actors
    assert "actor_nodes" not in s and "actor_node_ids" not in s
    assert "actor_nodes" not in summary(Path(s["out"]))
