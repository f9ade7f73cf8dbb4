"""The pool places each actor on the node a packing gives it (actors.kinds.planned_nodes):
by hand on listed nodes, and on a real two-node Ray cluster where Ray's own one-at-a-time
placement leaves the second actor without a node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cluster_helper import helper_run

from actors.kinds import check_schedulable, parse_actor_kinds, planned_nodes

HELPER = Path(__file__).resolve().parent / "pinning_cluster.py"


def node(node_id: str, cpus: float, alive: bool = True, **extra: float) -> dict:
    return {"NodeID": node_id, "Alive": alive, "Resources": {"CPU": cpus, **extra}}


def test_planned_nodes_by_hand() -> None:
    """Kinds sorted by name: a (1 CPU) then b (2 CPUs, 2 actors). Nodes: n1 with 2 CPUs, a dead
    n2, n3 with 3 CPUs. b needs one actor per node (2 + 2 > 3), so n1 holds one b and n3 the
    other b and a."""
    kinds = parse_actor_kinds({"b": "threads=2,count=2", "a": "threads=1"})
    nodes = [node("n1", 2), node("n2", 8, alive=False), node("n3", 3)]
    assert [k.name for k in kinds] == ["a", "b"]
    assert planned_nodes(kinds, nodes) == ["n3", "n1", "n3"]
    assert check_schedulable(kinds, nodes) == ["n3", "n1", "n3"]  # the pool's one search
    # a label only n1 declares: a goes there
    kinds = parse_actor_kinds({"a": "resource=fast", "b": "threads=2"})
    nodes = [node("n1", 2, fast=1.0), node("n3", 2)]
    assert planned_nodes(kinds, nodes) == ["n1", "n3"]


def test_planned_nodes_leave_ray_to_place_an_unpackable_pool() -> None:
    kinds = parse_actor_kinds({"w": "threads=2,count=3"})
    assert planned_nodes(kinds, [node("n1", 3), node("n2", 3)]) == [None, None, None]
    # a search cut short (budget of 0 steps): the pool starts with no pins
    import actors.kinds

    monkey = actors.kinds.packing
    try:
        actors.kinds.packing = lambda d, n: None  # type: ignore[assignment]
        assert check_schedulable(parse_actor_kinds({"w": "count=2"}), [node("n1", 3)]) == [
            None,
            None,
        ]
    finally:
        actors.kinds.packing = monkey


@pytest.fixture(scope="module")
def placed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("pinning") / "placed.json"
    with helper_run(HELPER, [str(out)], "pinning cluster", 240):
        return json.loads(out.read_text())


# slow (a two-node Ray cluster, ~16 s of set-up); the packing it relies on is checked above
@pytest.mark.slow
def test_a_pool_that_ray_alone_would_fragment_starts(placed: dict) -> None:
    assert placed["kinds"] == ["a", "b"]
    assert placed["nodes"] == [placed["second"], placed["head"]]
