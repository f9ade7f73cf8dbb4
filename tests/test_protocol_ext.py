"""The algorithm protocol's extension points, each on a test algorithm with numbers checkable by
hand: tables trained beside the model (Ditto), per-client noise streams (FedFA), what a client
sees after training (FedFM's anchors, FedUFO's class counts), layers an algorithm adds to the
model, the server picking the round's clients, and the flat layout's slices."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from simulator.algorithms import ALGORITHMS, Algorithm, register
from simulator.config.learning import AlgorithmConfig
from simulator.config.sections import build_config
from simulator.training.flat import FlatLayout
from simulator.training.models import STEP_NOISE, ModelSpec
from simulator.training.noise import client_noise
from simulator.training.spec import LocalSpec
from simulator.training.stacked import train_clients
from simulator.training.step import Finish, Step


class Pull(Algorithm):
    """A table ``v`` trained beside the model, pulled to the global model by 0.5||v - w||^2."""

    name = "pull_test"
    client_state = {"v": "params"}
    client_trainable = ("v",)

    def client_loss(self, s: Step) -> torch.Tensor:
        return s.ce + 0.5 * ((s.aux["v"] - s.global_flat) ** 2).sum()


class Noisy(Algorithm):
    """Adds ``0.01 * noise[0]`` to the representation through a layer it inserts."""

    name = "noisy_test"

    def extend_model(self, model: Any, spec: Any) -> Any:
        model.body = nn.Sequential(model.body, NoiseLayer())
        return model

    def noise_size(self, model: Any, batch_size: int) -> int:
        return 3

    def client_loss(self, s: Step) -> torch.Tensor:
        return s.ce


class NoiseLayer(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        nz = STEP_NOISE.get()
        return x if nz is None else x + 0.01 * nz[0]


class Counts(Algorithm):
    """Returns each client's sample count and class counts over the mask of its first epoch."""

    name = "counts_test"

    def client_finish(self, f: Finish) -> dict[str, torch.Tensor]:
        onehot = torch.nn.functional.one_hot(f.y, 10).to(f.mask.dtype)
        return {
            "n": f.mask.sum(),
            "classes": (onehot * f.mask.unsqueeze(-1)).sum((0, 1)),
            "feat": f.forward(f.split(f.flat), f.x[0])[0].sum(),
        }


@pytest.fixture
def registered() -> Iterator[None]:
    for c in (Pull, Noisy, Counts):
        register(c)
    yield
    for c in (Pull, Noisy, Counts):
        del ALGORITHMS[c.name]


def setup(
    extension: Any = None,
) -> tuple[nn.Module, FlatLayout, torch.Tensor, torch.Tensor, torch.Tensor]:
    model = ModelSpec("mlp", (1, 8, 8), 10, hidden=16, extension=extension).build(seed=0)
    layout = FlatLayout(model)
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(60, 1, 8, 8, generator=gen)
    y = torch.randint(0, 10, (60,), generator=gen)
    return model, layout, layout.flatten(model), x, y


IDX = [np.arange(0, 5), np.arange(5, 17), np.arange(17, 37), np.arange(37, 45)]


def both(
    a: Algorithm,
    model: nn.Module,
    layout: FlatLayout,
    g: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    **kw: Any,
) -> tuple[Any, Any]:
    spec = LocalSpec(lr=0.1, batch_size=10, step=a)
    out = [
        train_clients(
            model, layout, g, x, y, IDX, [1, 2, 1, 0], [1, 2, 3, 4], spec, vectorize=v, **kw
        )
        for v in (True, False)
    ]
    torch.testing.assert_close(out[0].updates, out[1].updates, rtol=0, atol=1e-5)
    for k in out[0].outputs:
        torch.testing.assert_close(out[0].outputs[k], out[1].outputs[k], rtol=0, atol=1e-5)
    return out[0], out[1]


def test_trained_table_moves_by_sgd_on_its_own_term(registered: None) -> None:
    """v starts at its stored 0 and follows v_S = w (1 - (1 - lr)^S) for S steps (steps
    [1, 4, 2, 0] for sizes [5, 12, 20, 8], epochs [1, 2, 1, 0], batch 10); the model's update
    equals FedAvg's (the term does not touch it)."""
    model, layout, g, x, y = setup()
    a = Pull(AlgorithmConfig(algorithm="pull_test"))
    n = layout.num_params
    vec, _ = both(a, model, layout, g, x, y, state={"v": torch.zeros(4, n)})
    w = g[:n]
    for i, s in enumerate([1, 4, 2, 0]):
        torch.testing.assert_close(vec.outputs["v"][i], w * (1 - 0.9**s), rtol=0, atol=1e-6)
    plain = train_clients(
        model, layout, g, x, y, IDX, [1, 2, 1, 0], [1, 2, 3, 4], LocalSpec(lr=0.1, batch_size=10)
    )
    torch.testing.assert_close(vec.updates, plain.updates, rtol=0, atol=1e-6)


def test_noise_streams_are_per_client_and_prefix_stable() -> None:
    long, short = (
        client_noise([5, 6], 4, 3, torch.device("cpu")),
        client_noise([5, 6], 2, 3, torch.device("cpu")),
    )
    assert long.shape == (2, 4, 3)
    torch.testing.assert_close(long[:, :2], short, rtol=0, atol=0)
    torch.testing.assert_close(long[0], client_noise([5], 4, 3, torch.device("cpu"))[0])
    assert not torch.equal(long[0], long[1])
    assert client_noise([5], 3, 0, torch.device("cpu")).shape == (1, 3, 0)


def test_noise_layer_sees_the_same_draws_on_both_paths(registered: None) -> None:
    a = Noisy(AlgorithmConfig(algorithm="noisy_test"))
    model, layout, g, x, y = setup(a)
    assert isinstance(model.body[-1], NoiseLayer)
    vec, _ = both(a, model, layout, g, x, y)
    quiet = train_clients(
        model, layout, g, x, y, IDX, [1, 2, 1, 0], [1, 2, 3, 4], LocalSpec(lr=0.1, batch_size=10)
    )
    assert not torch.allclose(vec.updates[:3], quiet.updates[:3], atol=1e-6)
    torch.testing.assert_close(vec.updates[3], quiet.updates[3])  # no steps, no noise


def test_finish_sees_each_sample_once(registered: None) -> None:
    model, layout, g, x, y = setup()
    a = Counts(AlgorithmConfig(algorithm="counts_test"))
    vec, _ = both(a, model, layout, g, x, y)
    np.testing.assert_array_equal(vec.outputs["n"].numpy(), [5, 12, 20, 0])
    for i, ix in enumerate(IDX[:3]):
        np.testing.assert_array_equal(
            vec.outputs["classes"][i].numpy(), np.bincount(y[ix].numpy(), minlength=10)
        )


def test_flat_slices() -> None:
    model = ModelSpec("mlp", (1, 2, 2), 3, hidden=2).build(seed=0)
    sl = FlatLayout(model).slices
    # body.1: Linear(4, 2) -> weight 8, bias 2; body.3: Linear(2, 2) -> 4, 2; head: 6, 3
    assert [(s.start, s.stop) for s in sl.values()] == [
        (0, 8),
        (8, 10),
        (10, 14),
        (14, 16),
        (16, 22),
        (22, 25),
    ]


class Lowest(Algorithm):
    name = "lowest_test"

    def choose(
        self,
        candidates: np.ndarray,
        m: int,
        rng: np.random.Generator,
        server: dict[str, torch.Tensor],
        store: Any = None,
    ) -> np.ndarray:
        return candidates[:m]


def test_algorithm_chooses_the_clients(tmp_path: Any) -> None:
    from simulator.round.engine import Simulation

    register(Lowest)
    try:
        cfg = build_config(
            flat={
                "backend": "local",
                "num_clients": 8,
                "clients_per_round": 3,
                "rounds": 1,
                "dataset": "digits",
                "algorithm": "lowest_test",
                "progress": False,
                "plots": False,
                "out": str(tmp_path),
            }
        )
        sim = Simulation(cfg)
        try:
            assert sim.run_round(0, 0.0).selected == [0, 1, 2]
        finally:
            sim.close()
    finally:
        del ALGORITHMS["lowest_test"]


class Echo(Algorithm):
    """Returns its trained parameters as an extra, and runs the global model's forward on every
    batch without using it (its loss is FedAvg's)."""

    name = "echo_test"

    def client_loss(self, s: Step) -> torch.Tensor:
        feats, _ = s.forward(s.global_params, s.x)
        return s.ce + 0.0 * feats.sum()

    def client_finish(self, f: Finish) -> dict[str, torch.Tensor]:
        return {"w": f.flat}


@pytest.fixture
def echo() -> Iterator[None]:
    register(Echo)
    yield
    del ALGORITHMS["echo_test"]


@pytest.mark.parametrize("norm", ["none", "batch"])
def test_extras_and_extra_forwards_leave_the_update_alone(norm: str, echo: None) -> None:
    """An extra that is the trained parameters comes back as them (not as the update), and a
    second forward on other parameters does not move the client's BatchNorm statistics: the
    rows equal FedAvg's exactly."""
    model = ModelSpec("mlp", (1, 8, 8), 10, hidden=16, norm=norm).build(seed=0)
    layout = FlatLayout(model)
    g = layout.flatten(model)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.rand(60, 1, 8, 8, generator=gen), torch.randint(0, 10, (60,), generator=gen)
    a = Echo(AlgorithmConfig(algorithm="echo_test"))
    vec, _ = both(a, model, layout, g, x, y)
    plain = train_clients(
        model, layout, g, x, y, IDX, [1, 2, 1, 0], [1, 2, 3, 4], LocalSpec(lr=0.1, batch_size=10)
    )
    torch.testing.assert_close(vec.updates, plain.updates, rtol=0, atol=1e-6)
    n = layout.num_params
    torch.testing.assert_close(vec.outputs["w"], g[:n] + vec.updates[:, :n], rtol=0, atol=1e-6)
