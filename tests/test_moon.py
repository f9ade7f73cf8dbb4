"""MOON: the model-contrastive loss worked by hand, the projection head, the first-round rule,
vectorized == sequential with BatchNorm and momentum, and a 2-round engine run with resume."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from simulator.algorithms import make_algorithm
from simulator.algorithms.moon import model_contrastive_loss, unflatten_like
from simulator.config.fields import ConfigError
from simulator.config.learning import AlgorithmConfig
from simulator.config.sections import build_config
from simulator.run.experiment import resume_config, run_experiment
from simulator.run.output import read_events
from simulator.training.models import ModelSpec
from simulator.training.spec import LocalSpec
from simulator.training.stacked import train_clients
from tests.chunk_helper import small_mlp


def moon(**params: Any) -> Any:
    return make_algorithm(AlgorithmConfig(algorithm="moon", algorithm_params=params))


def test_contrastive_loss_on_three_vectors_by_hand() -> None:
    """z = (1, 0), z_glob = (3, 4), z_prev = (0, 2), tau = 0.5:
    cos(z, z_glob) = 3/5 = 0.6, cos(z, z_prev) = 0, logits (1.2, 0),
    l_con = -log(e^1.2 / (e^1.2 + e^0)) = log(1 + e^-1.2) = 0.2632825."""
    z, zg, zp = (torch.tensor([[1.0, 0.0]]), torch.tensor([[3.0, 4.0]]), torch.tensor([[0.0, 2.0]]))
    loss = model_contrastive_loss(z, zg, zp, 0.5)
    torch.testing.assert_close(loss, torch.tensor(0.2632825), rtol=0, atol=1e-6)
    # the negative equal to z: logits (1.2, 2.0) -> log(1 + e^0.8) = 1.1711007
    torch.testing.assert_close(
        model_contrastive_loss(z, zg, z, 0.5), torch.tensor(1.1711007), rtol=0, atol=1e-6
    )
    # the negative equal to the positive (a client's first round): log 2, whatever z is
    torch.testing.assert_close(
        model_contrastive_loss(z, zg, zg, 0.5), torch.tensor(math.log(2.0)), rtol=0, atol=1e-6
    )
    # a padded row does not count: the batch mean is the first row's value
    two = model_contrastive_loss(
        torch.cat([z, z]), torch.cat([zg, zg]), torch.cat([zp, z]), 0.5, torch.tensor([1.0, 0.0])
    )
    torch.testing.assert_close(two, torch.tensor(0.2632825), rtol=0, atol=1e-6)


def test_projection_head_and_parameters() -> None:
    a = moon(out_dim=8)
    plain = ModelSpec("mlp", (1, 8, 8), 10, hidden=16).build(seed=0)
    model = ModelSpec("mlp", (1, 8, 8), 10, hidden=16, extension=a).build(seed=0)
    names = [n for n, _ in model.named_parameters()]
    # the feature extractor keeps its entry names; the head reads the 8-d projection
    assert names[:4] == [n for n, _ in plain.named_parameters()][:4]
    assert [tuple(p.shape) for n, p in model.named_parameters() if n not in names[:4]] == [
        (16, 16),
        (16,),
        (8, 16),
        (8,),
        (10, 8),
        (10,),
    ]
    feats, logits = model(torch.zeros(3, 1, 8, 8), with_features=True)
    assert feats.shape == (3, 8) and logits.shape == (3, 10)
    assert moon().p == {"mu": 1.0, "tau": 0.5, "out_dim": 256, "projection": True}
    bare = ModelSpec("mlp", (1, 8, 8), 10, hidden=16, extension=moon(projection=False)).build(
        seed=0
    )
    assert [n for n, _ in bare.named_parameters()] == [n for n, _ in plain.named_parameters()]
    with pytest.raises(ConfigError, match="moon out_dim=0 invalid; must be int >= 1"):
        moon(out_dim=0)
    with pytest.raises(ConfigError, match="moon tau=0.0 invalid; must be float > 0"):
        moon(tau=0)
    flat = torch.arange(6.0)
    parts = unflatten_like(flat, {"a": torch.zeros(2, 2), "b": torch.zeros(2)})
    assert parts["a"].tolist() == [[0.0, 1.0], [2.0, 3.0]] and parts["b"].tolist() == [4.0, 5.0]


IDX = [np.arange(0, 5), np.arange(5, 17), np.arange(17, 37), np.arange(37, 45)]


def test_first_round_equals_fedavg_on_the_same_model() -> None:
    """A client that never trained contrasts with the global model: zero gradient, so its
    update equals mu = 0 (FedAvg on MOON's model); with a previous model it differs. The store
    rows come back as the trained model and the flag 1 (kept for the client with no step)."""
    a = moon(mu=5.0, out_dim=8)
    model, layout, g, x, y = small_mlp(60, a)
    n = layout.num_params
    gen = torch.Generator().manual_seed(3)
    prev = g[:n] + 0.1 * torch.randn(4, n, generator=gen)
    fresh = {"prev": torch.zeros(4, n), "trained": torch.zeros(4, 1)}
    seen = {"prev": prev, "trained": torch.ones(4, 1)}
    run = [
        train_clients(
            model,
            layout,
            g,
            x,
            y,
            IDX,
            [1, 2, 1, 0],
            [1, 2, 3, 4],
            LocalSpec(lr=0.1, batch_size=10, step=s),
            state=st,
        )
        for s, st in ((a, fresh), (moon(mu=0.0, out_dim=8), fresh), (a, seen))
    ]
    torch.testing.assert_close(run[0].updates, run[1].updates, rtol=0, atol=1e-6)
    assert not torch.allclose(run[2].updates[:3], run[0].updates[:3], atol=1e-4)
    out = run[0].outputs
    torch.testing.assert_close(out["prev"][:3], g[:n] + run[0].updates[:3, :n])
    assert out["trained"].flatten().tolist() == [1.0, 1.0, 1.0, 0.0]
    assert torch.equal(out["prev"][3], torch.zeros(n))


@pytest.mark.parametrize("norm, momentum", [("none", 0.9), ("batch", 0.0)])
def test_vectorized_equals_sequential(norm: str, momentum: float) -> None:
    a = moon(mu=5.0, tau=0.5, out_dim=8)
    model, layout, g, x, y = small_mlp(60, a, norm)
    n = layout.num_params
    gen = torch.Generator().manual_seed(1)
    state = {
        "prev": g[:n] + 0.1 * torch.randn(4, n, generator=gen),
        "trained": torch.tensor([[1.0], [0.0], [1.0], [1.0]]),
    }
    spec = LocalSpec(lr=0.1, batch_size=10, weight_decay=1e-3, step=a, momentum=momentum)
    vec, seq = (
        train_clients(
            model, layout, g, x, y, IDX, [1, 2, 1, 0], [1, 2, 3, 4], spec, vectorize=v, state=state
        )
        for v in (True, False)
    )
    torch.testing.assert_close(vec.updates, seq.updates, rtol=0, atol=1e-5)
    for k in ("prev", "trained"):
        torch.testing.assert_close(vec.outputs[k], seq.outputs[k], rtol=0, atol=1e-5)
    np.testing.assert_allclose(vec.losses, seq.losses, rtol=0, atol=1e-5)


def flat(out: Path, **kw: Any) -> dict[str, Any]:
    return {
        "backend": "local",
        "dataset": "digits",
        "num_clients": 6,
        "clients_per_round": 3,
        "rounds": 3,
        "local_epochs": 1,
        "batch_size": 16,
        "hidden": 16,
        "progress": False,
        "plots": False,
        "algorithm": "moon",
        "algorithm_params": {"mu": 1.0, "out_dim": 8},
        "out": str(out),
        **kw,
    }


def test_engine_rounds_store_previous_model(tmp_path: Path) -> None:
    from simulator.round.engine import Simulation

    sim = Simulation(build_config(flat=flat(tmp_path / "a", rounds=2, defense="median")))
    try:
        g0 = sim.global_flat.clone()
        rec = sim.run_round(0, 0.0)
        ids = np.array(sorted(rec.selected))
        prev, present = sim.store.get("prev", ids)
        trained, _ = sim.store.get("trained", ids)
        assert rec.rows is not None and present.all()
        assert trained.flatten().tolist() == [1.0] * len(ids)
        rows = {c: r for c, r in zip(rec.rows.client_ids.tolist(), rec.rows.updates, strict=True)}
        n = sim.fed.layout.num_params
        for c, p in zip(ids.tolist(), prev, strict=True):  # the client's own trained model
            np.testing.assert_allclose(p, (g0[:n] + rows[c][:n]).numpy(), rtol=0, atol=1e-6)
        sim.run_round(1, 0.0)
        assert not torch.equal(sim.global_flat, g0)
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
