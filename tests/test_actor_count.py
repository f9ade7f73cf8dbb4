"""One seed, the same run whatever the number of actors.

The actors' partial sums of a linear rule were float32, so a run's bits depended on how its rows
were split over actors (each split groups them differently); they are float64 now. Checked by
hand and end to end (README, "Ray actors", says what still differs: a CNN client alone in its
chunk, MOON, FedALA, FedVB).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from actors.merge import weighted_sum
from simulator.config.sections import build_config


def test_weighted_sum_by_hand() -> None:
    """Rows [2^24, 1], [1, 0.5], [-2^24, 0.25], weights 1: the sums are 1 and 1.75 exactly,
    whole or as the two partial sums of a split after the second row. In float32,
    2^24 + 1 rounds to 2^24 and the first sum would be 0. Weights 2, 0, 1: 2^24 and 2.25 (a
    zero weight leaves its row out)."""
    rows = torch.tensor([[2.0**24, 1.0], [1.0, 0.5], [-(2.0**24), 0.25]])
    ones = torch.ones(3, dtype=torch.float64)
    w = torch.tensor([2.0, 0.0, 1.0], dtype=torch.float64)
    for blocked in (False, True):  # numpy's einsum (CPU), blocks of rows (GPU)
        assert weighted_sum(rows, ones, blocked).tolist() == [1.0, 1.75]
        split = weighted_sum(rows[:2], ones[:2], blocked) + weighted_sum(
            rows[2:], ones[2:], blocked
        )
        assert split.tolist() == [1.0, 1.75]
        assert weighted_sum(rows, w, blocked).tolist() == [2.0**24, 2.25]
        assert weighted_sum(rows[:0], w[:0], blocked).tolist() == [0.0, 0.0]


def run(tmp_path: Path, actors: int, extra: dict) -> list[dict]:
    from simulator.run.experiment import run_experiment
    from simulator.run.output import read_events

    out = tmp_path / f"a{actors}"
    flat = {
        "backend": "local",
        "dataset": "digits",
        "partition": "virtual",
        "num_clients": 100000,
        "clients_per_round": 40,
        "rounds": 3,
        "model": "mlp",
        "hidden": 16,
        "progress": False,
        "plots": False,
        "num_actors": actors,
        "out": str(out),
        **extra,
    }
    run_experiment(build_config(flat=flat))
    return [
        {k: e[k] for k in ("selected", "participants", "accuracy", "loss", "train_loss")}
        for e in read_events(out / "events.jsonl")
    ]


@pytest.mark.parametrize(
    "extra",
    # SCAFFOLD on 100 clients: clients return, with their control variates in the store
    [{}, {"algorithm": "scaffold", "num_clients": 100}],
    ids=["fedavg", "scaffold"],
)
def test_same_run_on_one_and_four_actors(tmp_path: Path, extra: dict) -> None:
    """Three rounds of 40 clients of a virtual population on one actor and on four
    (in-process workers, the code the Ray actors run): the same accuracy, test loss and
    training loss, to the last bit."""
    one, four = run(tmp_path, 1, extra), run(tmp_path, 4, extra)
    assert one == four
