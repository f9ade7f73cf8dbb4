"""FedFA (simulator/algorithms/fedfa.py, fedfa_layer.py): the server's Student-t gammas on 3
clients x 2 channels, the FFA layer on a tiny input with fixed noise, all worked by hand; where
the layers go; identity at test time; vectorized == sequential with the layers; a 2-round run
through the engine and its resume."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from simulator.algorithms import ServerRound, make_algorithm
from simulator.algorithms.fedfa_layer import FFALayer, ffa_layers, layer_gammas, student_t_gamma
from simulator.config.fields import ConfigError
from simulator.config.learning import AlgorithmConfig
from simulator.config.sections import build_config
from simulator.run.output import read_events
from simulator.training.flat import FlatLayout
from simulator.training.models import BATCH_MASK, STEP_NOISE, STEP_SHARED, ModelSpec
from simulator.training.spec import LocalSpec
from simulator.training.stacked import train_clients


def fedfa(**params: Any) -> Any:
    return make_algorithm(AlgorithmConfig(algorithm="fedfa", algorithm_params=params))


# ------------------------------------------------------------------ server: Eq. 5-6 by hand

MU = torch.tensor([[0.0, 0.0], [1.0, 2.0], [2.0, 4.0]])
SIGMA = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 4.0]])


def test_gamma_three_clients_two_channels_by_hand() -> None:
    """mubar of 3 clients: channel means (1, 2), variances over clients (1/M) (2/3, 8/3);
    t = v / (1 + v) = (2/5, 8/11); gamma = 2 t / sum t = (22/31, 40/31).
    sigmabar: variances (0, 2), t = (0, 2/3), gamma = (0, 2). Zero variance everywhere: ones."""
    torch.testing.assert_close(student_t_gamma(MU), torch.tensor([22 / 31, 40 / 31]))
    torch.testing.assert_close(student_t_gamma(SIGMA), torch.tensor([0.0, 2.0]))
    torch.testing.assert_close(student_t_gamma(torch.ones(3, 2)), torch.ones(2))
    # two layers (2 + 1 channels): each normalised to mean 1 on its own; a lone channel is 1
    both = torch.cat([MU, torch.tensor([[0.0], [5.0], [1.0]])], dim=1)
    torch.testing.assert_close(layer_gammas(both, [2, 1]), torch.tensor([22 / 31, 40 / 31, 1.0]))
    with pytest.raises(ValueError, match="statistics have 3 channels, the FFA layers 2"):
        layer_gammas(both, [2])


def test_server_update_by_hand() -> None:
    """Model entries w (2) and one FFA layer's mubar (2), sigmabar (2). Next model: FedAvg's
    step on w, the statistics back to (0, 1). Gammas from the kept rows only: the rejected
    4th client's (100, 100) would change them."""
    a = fedfa()
    slices = {"w": slice(0, 2), "body.1.1.ffa_stats": slice(2, 6)}  # [2, C]: mubar, sigmabar
    g = torch.tensor([1.0, 2.0, 0.3, 0.4, 1.1, 0.9])
    delta = torch.tensor([0.5, -0.5, 0.1, 0.1, 0.1, 0.1])
    extras = {
        "ffa_mu": torch.cat([MU, torch.full((1, 2), 100.0)]),
        "ffa_sigma": torch.cat([SIGMA, torch.full((1, 2), 100.0)]),
    }
    server = a.init_server(g, 2)
    assert {k: v.numel() for k, v in server.items()} == {"gamma_mu": 0, "gamma_sigma": 0}

    def step(kept: list[bool]) -> torch.Tensor:
        return a.server_update(
            ServerRound(
                0, g, delta, np.arange(4), np.array(kept), np.ones(4) / 4, extras, server, 4, slices
            )
        )

    nxt = step([True, True, True, False])
    torch.testing.assert_close(nxt, torch.tensor([1.5, 1.5, 0.0, 0.0, 1.0, 1.0]))
    torch.testing.assert_close(server["gamma_mu"], torch.tensor([22 / 31, 40 / 31]))
    torch.testing.assert_close(server["gamma_sigma"], torch.tensor([0.0, 2.0]))
    step([False, False, False, False])  # all rejected: gammas unchanged
    torch.testing.assert_close(server["gamma_mu"], torch.tensor([22 / 31, 40 / 31]))


# ------------------------------------------------------------------ the FFA layer by hand

# B = 2 samples, C = 1 channel, 1 x 2 pixels: sample 0 = (1, 3): mu 2, sigma 1;
# sample 1 = (2, 6): mu 4, sigma 2. Over the batch: mean mu 3, var mu 1; mean sigma 1.5,
# var sigma 0.25. A third row (100, 300) is padding (mask 0) where a mask is given.
X = torch.tensor([[[[1.0, 3.0]]], [[[2.0, 6.0]]], [[[100.0, 300.0]]]])
FIRE, IDLE = -1.0, 1.0  # coins: Phi(-1) = 0.159 < p = 0.5 fires, Phi(1) = 0.841 does not


def run_layer(
    variant: str, coin: float, padded: bool = False, gamma: float = 3.0, training: bool = True
) -> tuple[torch.Tensor, FFALayer]:
    """Noise = [coin, eps_mu (per sample), eps_sigma (per sample)] with eps_mu = (0.5, -1),
    eps_sigma = (1, -0.5) for the two real samples (0 for the padding row)."""
    layer = FFALayer(1, 0, 1, 0, 0, p=0.5, alpha=0.9, variant=variant, lam=0.5, eps=0.0)
    layer.train(training)
    x = X if padded else X[:2]
    e_mu, e_sigma = [0.5, -1.0] + [0.0] * padded, [1.0, -0.5] + [0.0] * padded
    noise = torch.tensor([coin, *e_mu, *e_sigma])
    shared = {"gamma_mu": torch.tensor([gamma]), "gamma_sigma": torch.tensor([gamma])}
    tokens = [
        STEP_NOISE.set(noise),
        STEP_SHARED.set(shared),
        BATCH_MASK.set(torch.tensor([1.0, 1.0, 0.0]) if padded else None),
    ]
    try:
        out = layer(x)
    finally:
        for var, tok in zip((STEP_NOISE, STEP_SHARED, BATCH_MASK), tokens, strict=True):
            var.reset(tok)
    return out[:2].reshape(2, 2), layer


@pytest.mark.parametrize("padded", [False, True])
def test_ffa_layer_full_by_hand(padded: bool) -> None:
    """gamma = 3: S_mu^2 = (3 + 1) * 1 = 4, S_sigma^2 = 4 * 0.25 = 1.
    mu^ = (2 + 0.5 * 2, 4 - 1 * 2) = (3, 2); sigma^ = (1 + 1, 2 - 0.5) = (2, 1.5).
    Normalised samples are (-1, 1) both: out = (-2 + 3, 2 + 3) = (1, 5) and
    (-1.5 + 2, 1.5 + 2) = (0.5, 3.5). Momentum (alpha 0.9): mubar = 0.1 * 3 = 0.3,
    sigmabar = 0.9 + 0.1 * 1.5 = 1.05. The padding row changes none of it."""
    out, layer = run_layer("full", FIRE, padded)
    torch.testing.assert_close(out, torch.tensor([[1.0, 5.0], [0.5, 3.5]]))
    torch.testing.assert_close(layer.ffa_stats, torch.tensor([[0.3], [1.05]]))


def test_ffa_layer_variants_by_hand() -> None:
    """C: S_mu = 1, S_sigma = 0.5 -> mu^ = (2.5, 3), sigma^ = (1.5, 1.75):
    out = (1, 4), (1.25, 4.75). R (lam 0.5): mu^ = (2.25, 3.5), sigma^ = (1.5, 1.75):
    out = (0.75, 3.75), (1.75, 5.25). gamma = 1 (what the layers use before the server has
    statistics): S_mu = sqrt(2), S_sigma = h = sqrt(0.5) -> mu^ = (2 + h, 4 - 2h),
    sigma^ = (1 + h, 2 - h / 2): out = (1, 3 + 2h), (2 - 1.5h, 6 - 2.5h)."""
    torch.testing.assert_close(run_layer("C", FIRE)[0], torch.tensor([[1.0, 4.0], [1.25, 4.75]]))
    torch.testing.assert_close(run_layer("R", FIRE)[0], torch.tensor([[0.75, 3.75], [1.75, 5.25]]))
    h = math.sqrt(0.5)
    torch.testing.assert_close(
        run_layer("full", FIRE, gamma=1.0)[0],
        torch.tensor([[1.0, 3 + 2 * h], [2 - 1.5 * h, 6 - 2.5 * h]]),
    )


def test_ffa_layer_hidden_units_by_hand() -> None:
    """Hidden units [B = 2, C = 1] = (1, 3): each its own mean, batch mean 2, variance 1;
    gamma 3 -> S_mu = 2; eps_mu = (0.5, -1) -> out = (1 + 1, 3 - 2) = (2, 1). No eps_sigma is
    drawn: noise = [coin, eps_mu]. Momentum: mubar = 0.1 * 2, sigmabar = 0.9 * 1 + 0.1 * 0."""
    layer = FFALayer(1, 0, 1, 0, 0, p=0.5, alpha=0.9, spatial=False, eps=0.0).train()
    assert layer.draws == 1
    tokens = [
        STEP_NOISE.set(torch.tensor([FIRE, 0.5, -1.0])),
        STEP_SHARED.set({"gamma_mu": torch.tensor([3.0])}),
    ]
    try:
        out = layer(torch.tensor([[1.0], [3.0]]))
    finally:
        STEP_SHARED.reset(tokens[1])
        STEP_NOISE.reset(tokens[0])
    torch.testing.assert_close(out, torch.tensor([[2.0], [1.0]]))
    torch.testing.assert_close(layer.ffa_stats, torch.tensor([[0.2], [0.9]]))


@pytest.mark.parametrize("p", [0.0, 0.3, 0.5, 1.0])
def test_coin_is_the_uniform_of_a_normal(p: float) -> None:
    """The layer fires iff 0.5 * (1 + erf(z / sqrt 2)) < p, tested as z < Phi^-1(p)."""
    layer = FFALayer(1, 0, 1, 0, 0, p=p, alpha=0.5)
    z = torch.linspace(-4, 4, 161)
    u = 0.5 * (1 + torch.erf(z / math.sqrt(2)))
    assert torch.equal(z < layer.threshold, u < p)


def test_ffa_is_identity_unless_fired_in_training() -> None:
    for out, layer in (run_layer("full", IDLE), run_layer("full", FIRE, training=False)):
        torch.testing.assert_close(out, X[:2].reshape(2, 2), rtol=0, atol=0)
        assert layer.ffa_stats.tolist() == [[0.0], [1.0]]
    layer = FFALayer(1, 0, 1, 0, 0, p=1.0, alpha=0.9).train()  # no step context: identity
    torch.testing.assert_close(layer(X), X, rtol=0, atol=0)


# ------------------------------------------------------------------ the model


def test_layers_after_each_stage_and_weights_unchanged() -> None:
    a = fedfa()
    for name, shape, channels in (
        ("cnn", (1, 28, 28), [16, 32]),
        ("cnn", (1, 8, 8), [16, 32]),
        ("mlp", (1, 8, 8), [24]),
    ):
        plain = ModelSpec(name, shape, 10, hidden=24, norm="batch").build(seed=3)
        ext = ModelSpec(name, shape, 10, hidden=24, norm="batch", extension=a).build(seed=3)
        assert [m.channels for m in ffa_layers(ext)] == channels
        assert dict(plain.named_parameters()).keys() == dict(ext.named_parameters()).keys()
        for (_, p), (_, q) in zip(plain.named_parameters(), ext.named_parameters(), strict=True):
            assert torch.equal(p, q)
        x = torch.rand(4, *shape)
        ext.eval(), plain.eval()
        torch.testing.assert_close(ext(x), plain(x), rtol=0, atol=0)  # identity at test time
    cnn = ModelSpec("cnn", (1, 8, 8), 10, extension=a).build(seed=0)
    assert a.noise_size(cnn, 10) == 2 + 10 * 2 * (16 + 32)  # coins, eps_mu, eps_sigma
    mlp = ModelSpec("mlp", (1, 8, 8), 10, hidden=24, extension=a).build(seed=0)
    assert a.noise_size(mlp, 10) == 1 + 10 * 24  # coin, eps_mu
    with pytest.raises(ConfigError, match="no conv stage or hidden block"):
        ModelSpec("logreg", (1, 8, 8), 10, extension=a).build(seed=0)
    with pytest.raises(ConfigError, match=r"fedfa variant='X' invalid; must be str one of"):
        fedfa(variant="X")
    with pytest.raises(
        ConfigError, match=r"algorithm 'fedfa': unknown parameter 'mu'; valid: \['alpha', "
    ):
        fedfa(mu=1.0)


@pytest.mark.parametrize("variant, momentum", [("full", 0.0), ("C", 0.9), ("R", 0.0)])
def test_vectorized_equals_sequential_cnn(variant: str, momentum: float) -> None:
    a = fedfa(variant=variant, p=0.7)
    model = ModelSpec("cnn", (1, 8, 8), 10, hidden=16, norm="batch", extension=a).build(seed=0)
    layout = FlatLayout(model)
    g = layout.flatten(model)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.rand(50, 1, 8, 8, generator=gen), torch.randint(0, 10, (50,), generator=gen)
    idx = [np.arange(0, 5), np.arange(5, 17), np.arange(17, 37), np.arange(37, 45)]
    shared = {k: 0.5 + torch.rand(48, generator=gen) for k in ("gamma_mu", "gamma_sigma")}
    spec = LocalSpec(lr=0.1, batch_size=8, step=a, momentum=momentum)
    out = [
        train_clients(
            model,
            layout,
            g,
            x,
            y,
            idx,
            [1, 2, 1, 0],
            [1, 2, 3, 4],
            spec,
            vectorize=v,
            shared=shared,
        )
        for v in (True, False)
    ]
    torch.testing.assert_close(out[0].updates, out[1].updates, rtol=0, atol=1e-5)
    assert set(out[0].outputs) == {"ffa_mu", "ffa_sigma"}
    for k in out[0].outputs:
        torch.testing.assert_close(out[0].outputs[k], out[1].outputs[k], rtol=0, atol=1e-5)
    mu = out[0].outputs["ffa_mu"]
    assert mu.shape == (4, 48) and bool((mu[:3] != 0).any(1).all()) and not mu[3].any()
    plain = train_clients(
        model,
        layout,
        g,
        x,
        y,
        idx,
        [1, 2, 1, 0],
        [1, 2, 3, 4],
        LocalSpec(lr=0.1, batch_size=8, momentum=momentum),
    )
    n = layout.num_params
    assert not torch.allclose(out[0].updates[:3, :n], plain.updates[:3, :n], atol=1e-4)


# ------------------------------------------------------------------ through the engine

RUN = {
    "backend": "local",
    "dataset": "digits",
    "model": "cnn",
    "hidden": 16,
    "norm": "batch",
    "num_clients": 4,
    "clients_per_round": 4,
    "partition": "iid",
    "feature_shift": 1.0,
    "local_epochs": 1,
    "batch_size": 32,
    "algorithm": "fedfa",
    "defense": "median",
    "progress": False,
    "plots": False,
}


def test_two_rounds_through_the_engine(tmp_path: Path) -> None:
    """The global model's FFA statistics stay (0, 1); the gammas are set after round 0 (one
    per channel of the CNN's two FFA layers, 16 + 32, mean 1 per layer)."""
    from simulator.round.engine import Simulation

    sim = Simulation(build_config(flat={**RUN, "rounds": 2, "out": str(tmp_path)}))
    try:
        sl = sim.fed.layout.slices
        stats = [n for n in sl if n.endswith("ffa_stats")]
        assert len(stats) == 2
        g0 = sim.global_flat.clone()
        for r in range(2):
            rec = sim.run_round(r, 0.0)
            assert rec.rows is not None and rec.rows.updates.shape[1] == sim.fed.layout.size
            for n in stats:
                assert torch.equal(sim.global_flat[sl[n]], g0[sl[n]])
            for k in ("gamma_mu", "gamma_sigma"):
                gam = sim.server_state[k]
                assert gam.shape == (48,) and bool(torch.isfinite(gam).all())
                torch.testing.assert_close(
                    torch.stack([gam[:16].mean(), gam[16:].mean()]), torch.ones(2)
                )
        assert not torch.equal(sim.global_flat, g0)
    finally:
        sim.close()


def test_resume_is_bitwise_identical(tmp_path: Path) -> None:
    from simulator.run.experiment import resume_config, run_experiment

    flat = {**RUN, "rounds": 3, "checkpoint_every": 1}
    crashed = build_config(flat={**flat, "out": str(tmp_path / "crashed")})
    with pytest.raises(KeyboardInterrupt):
        run_experiment(crashed, crash_after=2)
    resumed = run_experiment(resume_config(tmp_path / "crashed"))
    full = run_experiment(build_config(flat={**flat, "out": str(tmp_path / "full")}))
    wall = ("wall_time", "slowest_train_seconds", "chunks", "placement")
    ev = [
        [{k: v for k, v in e.items() if k not in wall} for e in read_events(p)]
        for p in (tmp_path / "crashed" / "events.jsonl", tmp_path / "full" / "events.jsonl")
    ]
    assert len(ev[0]) == 3 and ev[0] == ev[1]
    assert resumed["final_accuracy"] == full["final_accuracy"]
