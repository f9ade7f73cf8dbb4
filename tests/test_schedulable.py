"""check_schedulable: whether a cluster's alive nodes can hold a pool of actor kinds, with a
one-line error naming the kind when not, and the node each actor is pinned to when so (the
packing search itself is tested in tests/test_packing.py)."""

from __future__ import annotations

from typing import Any

import pytest

from actors.kinds import ActorKind, check_schedulable, parse_actor_kinds
from simulator.config.fields import ConfigError

# a 4-CPU node, a 2-CPU node with one GPU and the label 'fast', and a dead 64-CPU node
NODES: list[dict[str, Any]] = [
    {"NodeID": "n1", "Alive": True, "Resources": {"CPU": 4.0, "memory": 1e9, "node:10.0.0.1": 1.0}},
    {
        "NodeID": "n2",
        "Alive": True,
        "Resources": {"CPU": 2.0, "GPU": 1.0, "fast": 1.0, "node:10.0.0.2": 1.0},
    },
    {"NodeID": "n3", "Alive": False, "Resources": {"CPU": 64.0, "slow": 1.0}},
]


def kinds_of(**specs: str) -> list[ActorKind]:
    return parse_actor_kinds(specs)


def test_schedulable_fits_exactly() -> None:
    """4 CPU actors + 2 GPU actors (1 CPU, 0.5 GPU each, on 'fast'): 6 of 6 CPUs, 1 of 1 GPU;
    the GPU actors can only go to n2, which they fill, so the CPU actors go to n1."""
    pins = check_schedulable(
        kinds_of(a="count=4", g="device=gpu,count=2,gpus=0.5,resource=fast"), NODES
    )
    assert pins == ["n1"] * 4 + ["n2"] * 2
    assert check_schedulable([], NODES) == []


@pytest.mark.parametrize(
    "specs, message",
    [
        (
            {"big": "threads=64"},  # the dead 64-CPU node does not count
            "actor kind 'big': needs 64 CPUs per actor; the largest node has 4",
        ),
        (
            {"s": "resource=slow"},
            "actor kind 's': resource 'slow' not in the cluster (it has: CPU, GPU, fast, memory)",
        ),
        (
            {"h": "device=gpu,threads=3,gpus=0.5"},
            "actor kind 'h': no node has 3 CPUs and 0.5 GPUs together",
        ),
        ({"a": "count=7"}, "actor kind 'a': 7 actors need 7 CPUs in all; the cluster has 6"),
        (
            {"g": "device=gpu,count=5"},  # 5 x 0.25 GPU
            "actor kind 'g': 5 actors need 1.25 GPUs in all; the cluster has 1",
        ),
        (
            {"a": "count=4", "b": "count=3"},
            "actor kinds need 7 CPUs in total (a: 4 x 1, b: 3 x 1); the cluster has 6",
        ),
    ],
)
def test_schedulable_errors_name_the_kind(specs: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        check_schedulable(kinds_of(**specs), NODES)
    assert str(e.value) == message


def test_gpu_kind_on_a_cpu_cluster() -> None:
    with pytest.raises(ConfigError) as e:
        check_schedulable(kinds_of(g="device=gpu"), NODES[:1])
    assert str(e.value) == "actor kind 'g': needs 0.25 GPUs per actor; the largest node has 0"
