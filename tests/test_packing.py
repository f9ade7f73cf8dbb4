"""Packing a pool's actors onto nodes (actors/packing.py), and check_schedulable's use of it.

Every case is small enough to check by hand; the comments give the packing or why none exists.
"""

from __future__ import annotations

import pytest

from actors.kinds import check_schedulable, parse_actor_kinds
from actors.packing import packable, packing
from simulator.config.fields import ConfigError


def cpus(*sizes: float) -> list[dict[str, float]]:
    return [{"CPU": float(s)} for s in sizes]


@pytest.mark.parametrize(
    "demands, nodes, expected",
    [
        # 3 actors of 2 CPUs: totals 6 = 6, but a 3-CPU node holds one of them
        ([({"CPU": 2}, 3)], cpus(3, 3), False),
        # ... while 4 + 2 holds 2 + 1
        ([({"CPU": 2}, 3)], cpus(4, 2), True),
        # first fit decreasing fails here (3+3 on the first node leaves 1; 2+2+2 on the second,
        # one 2 left over), the packing 3+2+2 | 3+2+2 exists
        ([({"CPU": 3}, 2), ({"CPU": 2}, 4)], cpus(7, 7), True),
        # GPU shares: two 0.75 and one 0.5 on two 1-GPU nodes (2 = 2 in total); 0.75 + 0.5 > 1
        (
            [({"CPU": 1, "GPU": 0.75}, 2), ({"CPU": 1, "GPU": 0.5}, 1)],
            [{"CPU": 4, "GPU": 1}, {"CPU": 4, "GPU": 1}],
            False,
        ),
        # ... two 0.5 and two 0.5: 0.5 + 0.5 per node
        ([({"CPU": 1, "GPU": 0.5}, 4)], [{"CPU": 4, "GPU": 1}, {"CPU": 4, "GPU": 1}], True),
        # a label: only the second node has it, and it has 2 CPUs for the 3 labelled actors
        ([({"CPU": 1, "fast": 0.001}, 3)], [{"CPU": 8}, {"CPU": 2, "fast": 1}], False),
        ([], cpus(1), True),
    ],
)
def test_packable_by_hand(demands: list, nodes: list, expected: bool) -> None:
    assert packable(demands, nodes) is expected


def test_packable_undecided_when_the_budget_runs_out() -> None:
    """A search cut short answers None, not False: the pool is allowed to try."""
    demands = [({"CPU": 3}, 2), ({"CPU": 2}, 4)]
    assert packable(demands, cpus(7, 7), budget=1) is None
    assert packable(demands, cpus(7, 7), budget=100) is True


def test_packable_many_identical_nodes_is_quick() -> None:
    """64 nodes of 3 CPUs, 64 actors of 2 CPUs: fits (one per node); 65 do not (totals 130 <=
    192 pass, but no node holds two). Interchangeable nodes keep the search small."""
    assert packable([({"CPU": 2}, 64)], cpus(*[3] * 64)) is True
    assert packable([({"CPU": 2}, 65)], cpus(*[3] * 64)) is False


def test_check_schedulable_refuses_an_unpackable_pool() -> None:
    nodes = [
        {"NodeID": "a", "Alive": True, "Resources": {"CPU": 3.0, "memory": 1e9}},
        {"NodeID": "b", "Alive": True, "Resources": {"CPU": 3.0, "memory": 1e9}},
    ]
    kinds = parse_actor_kinds({"w": "count=3,threads=2"})
    with pytest.raises(ConfigError) as e:
        check_schedulable(kinds, nodes)
    assert str(e.value) == (
        "actor kinds fit the cluster's totals but no node packing holds "
        "them all (w: 3 x 2 CPUs; nodes: 3 CPUs; 3 CPUs)"
    )
    # two of them fit, one per node
    assert check_schedulable(parse_actor_kinds({"w": "count=2,threads=2"}), nodes) == ["a", "b"]


@pytest.mark.parametrize(
    "demands, nodes, expected",
    [
        # counts[kind][node]: 2 + 1 actors of 2 CPUs on 4 + 2
        ([({"CPU": 2}, 3)], cpus(4, 2), [[2, 1]]),
        # 3+2+2 | 3+2+2 on 7 + 7
        ([({"CPU": 3}, 2), ({"CPU": 2}, 4)], cpus(7, 7), [[1, 1], [2, 2]]),
        # the one packing: the 1-CPU actor on the 1-CPU node, the 2-CPU actor on the 2-CPU node
        # (placing the 1-CPU actor first, on the larger node, leaves the 2-CPU actor nowhere)
        ([({"CPU": 1}, 1), ({"CPU": 2}, 1)], cpus(2, 1), [[0, 1], [1, 0]]),
        # a kind of no actors keeps its row of zeros, in its place
        ([({"CPU": 5}, 0), ({"CPU": 1}, 2)], cpus(1, 1), [[0, 0], [1, 1]]),
        ([({"CPU": 2}, 3)], cpus(3, 3), False),
    ],
)
def test_packing_by_hand(demands: list, nodes: list, expected: object) -> None:
    assert packing(demands, nodes) == expected


def test_packing_respects_every_capacity_on_random_pools() -> None:
    """200 random pools of 1-3 kinds (CPU 1-3, GPU share 0-0.75) on 1-4 nodes: whenever a
    packing is returned it places every actor and overfills no node's CPUs or GPUs."""
    import numpy as np

    rng = np.random.default_rng(0)
    found = 0
    for _ in range(200):
        demands = [
            (
                {"CPU": int(rng.integers(1, 4)), "GPU": float(rng.choice([0, 0.25, 0.5, 0.75]))},
                int(rng.integers(0, 4)),
            )
            for _ in range(int(rng.integers(1, 4)))
        ]
        nodes = [
            {"CPU": float(rng.integers(1, 7)), "GPU": float(rng.integers(0, 2))}
            for _ in range(int(rng.integers(1, 5)))
        ]
        got = packing(demands, nodes)
        assert got is not None
        if got is False:
            continue
        found += 1
        assert [sum(row) for row in got] == [n for _, n in demands]
        for j, cap in enumerate(nodes):
            for r in ("CPU", "GPU"):
                used = sum(d[r] * row[j] for (d, _), row in zip(demands, got, strict=True))
                assert used <= cap[r] + 1e-9
    assert 50 < found < 200  # both outcomes occur
