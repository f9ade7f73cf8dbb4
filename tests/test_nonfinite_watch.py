"""The warning a run gives, once, when it stops learning for numerical reasons
(``simulator/run/watch.py``)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

from simulator.run.watch import NonFiniteWatch


def record(rnd: int, *reasons: str) -> SimpleNamespace:
    return SimpleNamespace(
        round=rnd, verdicts=[{"client": i, "reason": r} for i, r in enumerate(reasons)]
    )


def test_a_round_of_only_non_finite_updates_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    watch, sim = NonFiniteWatch(), SimpleNamespace(global_flat=torch.zeros(3))
    with caplog.at_level(logging.WARNING, "simulator"):
        watch.on_round_end(sim, record(0, "non-finite", ""))  # one row kept: no word
        watch.on_round_end(sim, record(1))  # an empty round: no word
        watch.on_round_end(sim, record(2, "non-finite", "non-finite", "non-finite"))
        watch.on_round_end(sim, record(3, "non-finite", "non-finite"))
    assert [r.getMessage()[:60] for r in caplog.records] == [
        "round 2: all 3 updates were non-finite and rejected, so the "
    ]
    assert watch.all_rejected == 2 and watch.model_broken is None


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_a_global_model_that_stops_being_finite_is_said_once(
    bad: float, caplog: pytest.LogCaptureFixture
) -> None:
    watch, sim = NonFiniteWatch(), SimpleNamespace(global_flat=torch.tensor([1e38, 0.0, -3.0]))
    with caplog.at_level(logging.WARNING, "simulator"):
        watch.on_round_end(sim, record(0, ""))  # large but finite
        sim.global_flat = torch.tensor([0.0, bad, 1.0])
        watch.on_round_end(sim, record(1, ""))
        watch.on_round_end(sim, record(2, ""))
    assert len(caplog.records) == 1 and watch.model_broken == 1
    assert caplog.records[0].getMessage().startswith("round 1: the global model is no longer")
