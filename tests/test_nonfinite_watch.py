"""The warning a run gives, once, when it stops learning for numerical reasons
(``simulator/run/watch.py``)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

from simulator.algorithms import make_algorithm
from simulator.config.sections import build_config
from simulator.run.watch import NonFiniteWatch, warn_untrained_global


def record(rnd: int, *reasons: str) -> SimpleNamespace:
    return SimpleNamespace(
        round=rnd,
        verdicts=[{"client": i, "kept": r == "", "reason": r} for i, r in enumerate(reasons)],
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


def verdicts(rnd: int, *kept: bool, reason: str = "entropy>=threshold") -> SimpleNamespace:
    return SimpleNamespace(
        round=rnd,
        verdicts=[
            {"client": i, "kept": k, "reason": "" if k else reason} for i, k in enumerate(kept)
        ],
    )


def test_a_defense_that_keeps_nothing_three_rounds_running_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    watch = NonFiniteWatch()
    sim = SimpleNamespace(
        global_flat=torch.zeros(3), cfg=SimpleNamespace(defense=SimpleNamespace(defense="sageflow"))
    )
    with caplog.at_level(logging.WARNING, "simulator"):
        watch.on_round_end(sim, verdicts(0, False, False))
        watch.on_round_end(sim, verdicts(1, False, False))
        watch.on_round_end(sim, verdicts(2, True, False))  # one kept: the streak starts again
        watch.on_round_end(sim, verdicts(3, False, False))
        watch.on_round_end(sim, verdicts(4))  # an empty round neither breaks nor extends it
        watch.on_round_end(sim, verdicts(5, False, False, reason="non-finite"))  # said apart
        watch.on_round_end(sim, verdicts(6, False, False))
        watch.on_round_end(sim, verdicts(7, False, False))
        assert len(caplog.records) == 1 and watch.none_kept is None  # round 5's own line
        watch.on_round_end(sim, verdicts(8, False, False, False))
        watch.on_round_end(sim, verdicts(9, False))
        watch.on_round_end(sim, verdicts(10, False))
        watch.on_round_end(sim, verdicts(11, False))
    assert [r.getMessage() for r in caplog.records[1:]] == [
        "rounds 6-8: the defense 'sageflow' kept none of the updates (most often: "
        "'entropy>=threshold'), so the model did not move in them; check its parameters "
        "(--defense-params); later rounds are not reported again"
    ]
    assert watch.none_kept == 8 and watch.all_rejected == 5


@pytest.mark.parametrize(
    ("name", "fraction", "warned"),
    [("ktpfl", 0.0, True), ("ktpfl", 0.2, False), ("fedavg", 0.0, False), ("ditto", 0.0, False)],
)
def test_an_algorithm_without_a_learning_global_model_is_said_at_the_start(
    name: str, fraction: float, warned: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # found at stop 57: ktpfl on the defaults ended "final test accuracy: 0.1" with exit 0
    flat = {"algorithm": name, "client_test_fraction": fraction, "public_fraction": 0.05}
    cfg = build_config(flat=flat)
    with caplog.at_level(logging.WARNING, "simulator"):
        assert warn_untrained_global(cfg, make_algorithm(cfg.algorithm)) is warned
    said = [r.getMessage() for r in caplog.records]
    assert said == (
        [
            "ktpfl keeps no global model that learns: final_accuracy will be an untrained "
            "model's; give --client-test-fraction > 0 to score each client with its own model"
        ]
        if warned
        else []
    )
