"""A callback's ``refuse(sim, selected)``: clients refused when their round starts (Siren's bans
under the population rule) neither train nor upload, and the round does not wait for them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import small_config

from simulator.round.engine import Simulation


class Seen:
    """Keeps the plan (after the hooks' refusals) and can refuse a fixed set of clients."""

    def __init__(self, refused: set[int] | None = None) -> None:
        self.refused = refused
        self.plan: Any = None

    def on_plan(self, sim: Simulation, plan: Any) -> None:
        self.plan = plan

    def on_round_end(self, sim: Simulation, record: Any) -> None:
        pass


class Refuses(Seen):
    def refuse(self, sim: Simulation, selected: np.ndarray) -> set[int]:
        assert self.refused is not None
        return self.refused & set(selected.tolist())


def first_round(tmp_path: Path, hook: Seen) -> Any:
    sim = Simulation(small_config(tmp_path, rounds=1, seed=3), [hook])
    try:
        return sim.run_round(0, 0.0)
    finally:
        sim.close()


def test_the_round_does_not_wait_for_a_refused_client(tmp_path: Path) -> None:
    plain = Seen()
    a = first_round(tmp_path / "a", plain)
    arr = {x.client_id: x for x in plain.plan.arrivals}
    slowest = max(arr, key=lambda c: arr[c].finish_time)
    others = max(x.finish_time for c, x in arr.items() if c != slowest)
    assert others < arr[slowest].finish_time  # the case is not degenerate
    assert a.virtual_time == arr[slowest].finish_time  # wait_for_all: the slowest closes it

    hook = Refuses({slowest})
    b = first_round(tmp_path / "b", hook)
    assert b.selected == a.selected  # refused after selection, with the same draws
    assert b.virtual_time == others  # the round ended with the slowest of the others
    assert slowest not in hook.plan.now and slowest not in b.participants
    assert slowest not in [t.client_id for t in hook.plan.tasks]  # and it never trained
    why = {v["client"]: (v["kept"], v["reason"]) for v in b.verdicts}
    assert why[slowest] == (False, "banned")
    spent = a.extra["device_seconds"] - arr[slowest].compute_s  # its compute is not counted
    assert b.extra["device_seconds"] == pytest.approx(spent, rel=1e-12)
