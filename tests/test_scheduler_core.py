"""simulator/scheduler: instances, baselines, the LST bound, local search and the GA."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.scheduler_study import instances as scheduler_instances
from simulator.scheduler import BASELINES, genetic, loads, lst_bound, makespan, schedule
from simulator.scheduler.ga import population_loads
from simulator.scheduler.instances import braun_instance, class_names, range_based_etc
from simulator.scheduler.local_search import improve

# 3 tasks x 2 machines, worked by hand in the tests below
HAND = np.array([[2.0, 4.0], [3.0, 1.0], [5.0, 8.0]])
# identical machines, tasks 3 3 2 2 2: total 12 packs perfectly into {3, 3} and {2, 2, 2}
PACK = np.array([[3.0, 3.0], [3.0, 3.0], [2.0, 2.0], [2.0, 2.0], [2.0, 2.0]])


def test_makespan_and_loads() -> None:
    assert loads(HAND, np.array([0, 1, 0])).tolist() == [7.0, 1.0]
    assert makespan(HAND, np.array([1, 1, 1])) == 13.0
    with pytest.raises(ValueError, match="assign"):
        makespan(HAND, np.array([0, 2, 0]))


def test_minmin_by_hand() -> None:
    # step 1: earliest completions t0 2 (m0), t1 1 (m1), t2 5 (m0) -> t1 on m1, ready [0, 1]
    # step 2: t0 min(2, 5) = 2 on m0, t2 min(5, 9) = 5 -> t0 on m0, ready [2, 1]
    # step 3: t2 min(2 + 5, 1 + 8) = 7 on m0 -> makespan 7
    assign = BASELINES["minmin"](HAND)
    assert assign.tolist() == [0, 1, 0]
    assert makespan(HAND, assign) == 7.0


def test_sufferage_by_hand() -> None:
    # pass 1: sufferages t0 4-2 = 2 (wants m0), t1 3-1 = 2 (m1), t2 8-5 = 3 (m0):
    #   m0 takes t2 (3 > 2), m1 takes t1 -> ready [5, 1]
    # pass 2: t0 completes at 5 + 2 = 7 on m0, 1 + 4 = 5 on m1 -> m1; makespan 5
    assign = BASELINES["sufferage"](HAND)
    assert assign.tolist() == [1, 1, 0]
    assert makespan(HAND, assign) == 5.0


def test_lpt_and_round_robin_by_hand() -> None:
    # lengths (min ETC) 2, 1, 5 -> order t2, t0, t1; t2 -> m0 (5 < 8), t0 -> m1 (4 < 7),
    # t1 -> m1 (4 + 1 = 5 < 5 + 3 = 8)
    assert BASELINES["lpt"](HAND).tolist() == [1, 1, 0]
    assert BASELINES["round_robin"](HAND).tolist() == [0, 1, 0]


def test_unknown_method_lists_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown 'heft'; valid: \['ga', 'lpt', 'minmin'"):
        schedule("heft", HAND)


def test_lst_bound_known_optima() -> None:
    # identical machines, perfect packing: bound = optimum = 12 / 2
    assert lst_bound(PACK) == pytest.approx(6.0)
    # one task: the plain LP splits it (T = 100/11 = 9.09); LST forbids p > T, so T = 10
    assert lst_bound(np.array([[10.0, 100.0]])) == pytest.approx(10.0)
    # each task has its own fast machine
    assert lst_bound(np.array([[1.0, 3.0], [3.0, 1.0]])) == pytest.approx(1.0)
    # 1 machine: the sum
    assert lst_bound(np.array([[1.0], [2.0], [4.0]])) == pytest.approx(7.0)


def test_lst_bound_below_every_schedule() -> None:
    etc = np.random.default_rng(3).uniform(1, 20, size=(12, 3))
    bound = lst_bound(etc)
    for f in BASELINES.values():
        assert bound <= makespan(etc, f(etc)) + 1e-9


def test_improve_packs_by_hand() -> None:
    # all on m0 (load 12): move a 3 -> [9, 3]; move the other 3 -> [6, 6]; nothing helps then
    assign, load = improve(PACK, np.zeros(5, dtype=np.int64))
    assert assign.tolist() == [1, 1, 0, 0, 0]
    assert load.tolist() == [6.0, 6.0]


def test_population_loads_match_one_by_one() -> None:
    pop = np.array([[0, 1, 0], [1, 1, 1], [1, 0, 0]])
    assert population_loads(HAND, pop).tolist() == [[7.0, 1.0], [0.0, 13.0], [8.0, 4.0]]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ga_never_worse_than_its_seeds(seed: int) -> None:
    etc = np.random.default_rng(seed).uniform(1, 50, size=(40, 5))
    res = genetic(etc, seed=seed, generations=5, seconds=60)
    assert res.makespan == makespan(etc, res.assign)
    assert set(res.seed_makespans) == set(BASELINES)
    assert res.makespan <= min(res.seed_makespans.values())
    assert res.makespan >= lst_bound(etc) - 1e-9


def test_ga_keeps_a_given_seed_and_finds_the_packing() -> None:
    perfect = np.array([0, 0, 1, 1, 1])
    assert genetic(PACK, generations=3, seconds=60, seeds=[perfect]).makespan == 6.0
    assert genetic(PACK, generations=20, seconds=60).makespan == 6.0


def test_ga_deterministic_for_a_seed() -> None:
    etc = braun_instance("i_hilo", tasks=64, machines=4, seed=5)
    a = genetic(etc, seed=7, generations=4, seconds=60)
    b = genetic(etc, seed=7, generations=4, seconds=60)
    assert a.generations == b.generations == 4
    assert np.array_equal(a.assign, b.assign) and a.makespan == b.makespan


def test_braun_instances_follow_the_method() -> None:
    assert len(class_names()) == 12
    c = braun_instance("c_hilo", tasks=20, machines=6, seed=1)
    assert c.shape == (20, 6) and np.all(np.diff(c, axis=1) >= 0)  # every row sorted
    s = braun_instance("s_lohi", tasks=20, machines=6, seed=1)
    assert np.all(np.diff(s[:, 0::2], axis=1) >= 0)  # even columns sorted
    assert not np.all(np.diff(s[:, 1::2], axis=1) >= 0)  # odd columns as drawn
    # entries lie in [1, R_task * R_mach): lo-lo means [1, 100 * 10)
    lolo = braun_instance("i_lolo", tasks=200, machines=8, seed=2)
    assert lolo.min() >= 1.0 and lolo.max() < 1000.0
    assert np.array_equal(lolo, braun_instance("i_lolo", tasks=200, machines=8, seed=2))
    assert not np.array_equal(lolo, braun_instance("i_lolo", tasks=200, machines=8, seed=3))
    with pytest.raises(ValueError, match="unknown 'x_hihi'; valid: "):
        braun_instance("x_hihi")
    with pytest.raises(ValueError, match="consistency"):
        range_based_etc(4, 2, 10.0, 10.0, "q", 0)


def test_benchmark_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.json"
    rc = scheduler_instances.main(
        ["--classes", "i_lolo", "--no-large", "--seconds", "0.3", "--json", str(out)]
    )
    assert rc == 0
    (rec,) = json.loads(out.read_text())["instances"]
    assert set(rec) == {"name", "tasks", "machines", "lp_bound", "makespan", "seconds"}
    assert (rec["name"], rec["tasks"], rec["machines"]) == ("i_lolo", 512, 16)
    assert set(rec["makespan"]) == {"ga", "lpt", "minmin", "sufferage", "round_robin"}
    assert rec["lp_bound"] <= rec["makespan"]["ga"] <= rec["makespan"]["minmin"]
    assert "i_lolo" in capsys.readouterr().out
    assert scheduler_instances.main(["--classes", "nope", "--no-large"]) == 2
    assert "unknown class 'nope'" in capsys.readouterr().err


def test_lst_bound_binary_search() -> None:
    # 4 tasks, 1 on m0, 3.5 on m1. Plain LP: T + T / 3.5 = 4 -> T = 3.11 < 3.5, so LST first
    # allows m0 only (needs T = 4 >= 3.5: infeasible there); from T = 3.5 on m1 is allowed and
    # 3 tasks on m0 + 1 on m1 fit: the bound is 3.5 (and so is the optimum)
    etc = np.array([[1.0, 3.5]] * 4)
    assert lst_bound(etc) == pytest.approx(3.5)
    assert lst_bound(etc, upper=3.5) == pytest.approx(3.5)
    assert makespan(etc, BASELINES["minmin"](etc)) == 3.5


def test_lst_bound_with_an_upper_bound() -> None:
    assert lst_bound(PACK, upper=6.0) == pytest.approx(6.0)
    with pytest.raises(ValueError, match="upper 5.0 is below a lower bound"):
        lst_bound(PACK, upper=5.0)
