"""FedFM and FedFM-Lite: anchor aggregation with class counts by hand (a rejected row moves
nothing), local anchors and the contrastive-guiding loss by hand, the switch-on round,
vectorized == sequential with anchors, and engine rounds (anchors = class means of the global
model's features, resume bitwise)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from simulator.algorithms import ServerRound, make_algorithm
from simulator.algorithms.fedfm import (
    aggregate_anchors,
    contrastive_guiding_loss,
    local_anchors,
)
from simulator.config.fields import ConfigError
from simulator.config.learning import AlgorithmConfig
from simulator.config.sections import build_config
from simulator.run.experiment import resume_config, run_experiment
from simulator.run.output import read_events
from simulator.training.spec import LocalSpec
from simulator.training.stacked import train_clients
from simulator.training.step import Finish
from tests.chunk_helper import small_mlp


def fedfm(name: str = "fedfm", **params: Any) -> Any:
    return make_algorithm(AlgorithmConfig(algorithm=name, algorithm_params=params))


def round_of(
    rnd: int,
    anchors: torch.Tensor,
    counts: torch.Tensor,
    kept: list[bool],
    server: dict[str, torch.Tensor],
) -> ServerRound:
    k = len(kept)
    return ServerRound(
        rnd,
        torch.zeros(3),
        torch.zeros(3),
        np.arange(k),
        np.array(kept),
        np.full(k, 1.0 / k),
        {"anchor": anchors, "count": counts},
        server,
        10,
    )


def test_anchor_aggregation_with_class_counts_by_hand() -> None:
    """3 clients, 3 classes, 2-d anchors; client 3 is rejected.

    class 0: client 1 (1, 0) x 2 samples, client 2 (4, 0) x 1  -> (2*1 + 1*4) / 3 = (2, 0)
    class 1: client 1 (0, 2) x 1,         client 2 (0, 5) x 2  -> (0, (2 + 10) / 3) = (0, 4)
    class 2: only the rejected client 3 holds it              -> keeps the previous (7, 7)
    """
    anchors = torch.tensor(
        [
            [[1.0, 0.0], [0.0, 2.0], [0.0, 0.0]],
            [[4.0, 0.0], [0.0, 5.0], [0.0, 0.0]],
            [[100.0, 100.0], [50.0, 50.0], [9.0, 9.0]],
        ]
    )
    counts = torch.tensor([[2.0, 1.0, 0.0], [1.0, 2.0, 0.0], [5.0, 5.0, 3.0]])
    previous = torch.tensor([[0.0, 0.0], [0.0, 0.0], [7.0, 7.0]])
    want = torch.tensor([[2.0, 0.0], [0.0, 4.0], [7.0, 7.0]])
    torch.testing.assert_close(aggregate_anchors(anchors[:2], counts[:2], previous), want)
    # through the server update: the verdicts pick the rows; the model step is FedAvg's
    a = fedfm(lam=2.0, start_round=2)
    server = a.init_server(torch.zeros(3), 3)
    assert server["anchors"].numel() == 0 and server["fm_weight"].tolist() == [0.0]
    server["anchors"] = previous
    a.server_update(round_of(0, anchors, counts, [True, True, False], server))
    torch.testing.assert_close(server["anchors"], want)
    assert server["fm_weight"].tolist() == [0.0]  # round 1 < T_s = 2
    # before the first aggregation there is no previous anchor: an absent class is zero
    first = aggregate_anchors(anchors[:2], counts[:2], torch.zeros(0))
    torch.testing.assert_close(first, torch.tensor([[2.0, 0.0], [0.0, 4.0], [0.0, 0.0]]))
    # a round whose rows were all rejected moves nothing; the weight switches on at T_s
    a.server_update(round_of(1, anchors, counts, [False, False, False], server))
    torch.testing.assert_close(server["anchors"], want)
    assert server["fm_weight"].tolist() == [2.0]


def test_local_anchors_and_cg_loss_by_hand() -> None:
    """Features (1, 0), (3, 0), (0, 2), (5, 5) with labels 0, 0, 1, 1, the last row padding:
    anchors (2, 0), (0, 2), (0, 0); counts 2, 1, 0."""
    f = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0], [5.0, 5.0]])
    y = torch.tensor([0, 0, 1, 1])
    m = torch.tensor([1.0, 1.0, 1.0, 0.0])
    anchors, counts = local_anchors(f, y, m, 3)
    torch.testing.assert_close(anchors, torch.tensor([[2.0, 0.0], [0.0, 2.0], [0.0, 0.0]]))
    assert counts.tolist() == [2.0, 1.0, 0.0]
    # CG: f = (2, 0) -> (1, 0); anchors (1, 0), (0, 3), (-2, 0) -> cosines 1, 0, -1; alpha 0.5
    # -> logits (2, 0, -2); label 0: log(1 + e^-2 + e^-4) = 0.1429316
    a = torch.tensor([[1.0, 0.0], [0.0, 3.0], [-2.0, 0.0]])
    want = math.log(1 + math.exp(-2) + math.exp(-4))
    got = contrastive_guiding_loss(torch.tensor([[2.0, 0.0]]), torch.tensor([0]), a, 0.5)
    torch.testing.assert_close(got, torch.tensor(want), rtol=0, atol=1e-6)
    # label 2 on the same row: 2 + log(1 + e^-2 + e^-4) - (-2) = 4.1429316
    got2 = contrastive_guiding_loss(
        torch.tensor([[2.0, 0.0], [2.0, 0.0]]),
        torch.tensor([0, 2]),
        a,
        0.5,
        torch.tensor([0.0, 1.0]),
    )
    torch.testing.assert_close(got2, torch.tensor(4.0 + want), rtol=0, atol=1e-5)


def test_finish_uses_global_or_local_model() -> None:
    """fedfm's local anchors come from the round's global model, fedfm_lite's from the trained
    one (a stub forward returning the parameter ``w`` times the input as features)."""
    x = torch.tensor([[[1.0], [3.0]]])  # [S=1, B=2, 1]
    y, m = torch.tensor([[0, 1]]), torch.ones(1, 2)

    def forward(p: dict[str, torch.Tensor], xx: torch.Tensor) -> Any:
        return xx * p["w"], torch.zeros(len(xx), 2)

    def finish(a: Any) -> dict[str, torch.Tensor]:
        return a.client_finish(
            Finish(
                torch.tensor([2.0]),
                torch.tensor([10.0]),
                {},
                {},
                torch.tensor(1.0),
                0.1,
                {},
                x,
                y,
                m,
                {},
                forward,
                lambda v: {"w": v},
            )
        )

    assert finish(fedfm())["anchor"].flatten().tolist() == [10.0, 30.0]
    assert finish(fedfm("fedfm_lite"))["anchor"].flatten().tolist() == [2.0, 6.0]
    assert finish(fedfm())["count"].tolist() == [1.0, 1.0]


IDX = [np.arange(0, 5), np.arange(5, 17), np.arange(17, 37), np.arange(37, 45)]


@pytest.mark.parametrize(
    "name, norm, momentum", [("fedfm", "none", 0.9), ("fedfm_lite", "batch", 0.0)]
)
def test_vectorized_equals_sequential_with_anchors(name: str, norm: str, momentum: float) -> None:
    a = fedfm(name, lam=2.0, alpha=0.1)
    model, layout, g, x, y = small_mlp(60, norm=norm)
    anchors = torch.randn(10, 16, generator=torch.Generator().manual_seed(2)).abs()
    spec = LocalSpec(lr=0.1, batch_size=10, weight_decay=1e-3, step=a, momentum=momentum)
    on = {"anchors": anchors, "fm_weight": torch.tensor([2.0])}
    vec, seq = (
        train_clients(
            model, layout, g, x, y, IDX, [1, 2, 1, 0], [1, 2, 3, 4], spec, vectorize=v, shared=on
        )
        for v in (True, False)
    )
    torch.testing.assert_close(vec.updates, seq.updates, rtol=0, atol=1e-5)
    for k in ("anchor", "count"):
        torch.testing.assert_close(vec.outputs[k], seq.outputs[k], rtol=0, atol=1e-5)
    assert vec.outputs["count"].sum(1).tolist() == [5.0, 12.0, 20.0, 0.0]
    # weight 0 (before T_s) is FedAvg's step; weight 2 moves the model elsewhere
    off = train_clients(
        model,
        layout,
        g,
        x,
        y,
        IDX,
        [1, 2, 1, 0],
        [1, 2, 3, 4],
        spec,
        shared={"anchors": anchors, "fm_weight": torch.tensor([0.0])},
    )
    plain = train_clients(
        model,
        layout,
        g,
        x,
        y,
        IDX,
        [1, 2, 1, 0],
        [1, 2, 3, 4],
        LocalSpec(lr=0.1, batch_size=10, weight_decay=1e-3, momentum=momentum),
    )
    torch.testing.assert_close(off.updates, plain.updates, rtol=0, atol=1e-6)
    assert not torch.allclose(vec.updates[:3], plain.updates[:3], atol=1e-4)


def test_parameters() -> None:
    assert fedfm().p == {"lam": 1.0, "alpha": 0.1, "start_round": 5}
    with pytest.raises(
        ConfigError,
        match="algorithm 'fedfm': unknown parameter 'tau'; valid: "
        r"\['alpha', 'lam', 'start_round'\]",
    ):
        fedfm(tau=1.0)
    with pytest.raises(ConfigError, match="fedfm_lite start_round=-1 invalid; must be int >= 0"):
        fedfm("fedfm_lite", start_round=-1)


def flat(out: Path, **kw: Any) -> dict[str, Any]:
    return {
        "backend": "local",
        "dataset": "digits",
        "num_clients": 4,
        "clients_per_round": 4,
        "partition": "iid",
        "rounds": 3,
        "local_epochs": 1,
        "batch_size": 16,
        "hidden": 16,
        "progress": False,
        "plots": False,
        "algorithm": "fedfm",
        "algorithm_params": {"lam": 1.0, "start_round": 1},
        "out": str(out),
        **kw,
    }


def test_engine_anchors_are_class_means_of_global_features(tmp_path: Path) -> None:
    """All clients every round, every row kept: after round 0 the anchors are the class means
    of the initial global model's features over the whole training set."""
    from simulator.round.engine import Simulation

    sim = Simulation(build_config(flat=flat(tmp_path / "a", rounds=2)))
    try:
        fed = sim.fed
        fed.layout.load(fed.model, sim.global_flat)
        fed.model.eval()
        with torch.no_grad():
            feats = fed.model.features(torch.from_numpy(fed.x_train))
        y = torch.from_numpy(fed.y_train).long()
        want = torch.stack([feats[y == c].mean(0) for c in range(10)])
        sim.run_round(0, 0.0)
        torch.testing.assert_close(sim.server_state["anchors"], want, rtol=0, atol=1e-5)
        assert sim.server_state["fm_weight"].tolist() == [1.0]
        sim.run_round(1, 0.0)
        assert not torch.allclose(sim.server_state["anchors"], want, atol=1e-4)
    finally:
        sim.close()


def test_resume_is_bitwise(tmp_path: Path) -> None:
    crashed = build_config(flat=flat(tmp_path / "crashed", checkpoint_every=1))
    with pytest.raises(KeyboardInterrupt):
        run_experiment(crashed, crash_after=2)
    run_experiment(resume_config(tmp_path / "crashed"))
    run_experiment(build_config(flat=flat(tmp_path / "full")))
    keys = ("round", "accuracy", "loss", "train_loss", "selected", "participants")
    got, ref = (read_events(tmp_path / d / "events.jsonl") for d in ("crashed", "full"))
    assert [{k: e[k] for k in keys} for e in got] == [{k: e[k] for k in keys} for e in ref]
    assert len(got) == 3
