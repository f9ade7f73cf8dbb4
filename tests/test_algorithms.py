"""The algorithm protocol: registry and parameters, FedDyn's and SCAFFOLD's state updates worked
by hand on a 2-parameter quadratic, vectorized == sequential for every algorithm, momentum, and
parameters kept on the client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from simulator.algorithms import ALGORITHMS, Algorithm, ServerRound, make_algorithm, register
from simulator.config.fields import ConfigError
from simulator.config.learning import AlgorithmConfig
from simulator.config.sections import build_config
from simulator.training.flat import FlatLayout
from simulator.training.models import ModelSpec
from simulator.training.spec import LocalSpec, make_schedule
from simulator.training.stacked import train_clients
from simulator.training.step import PUBLIC_INPUTS, Finish, Step


def algo(name: str, **params: Any) -> Algorithm:
    return make_algorithm(AlgorithmConfig(algorithm=name, algorithm_params=params))


# ------------------------------------------------------------------------- registry, params


def test_registry_and_parameters() -> None:
    assert {"fedavg", "fedprox", "feddyn", "scaffold"} <= set(ALGORITHMS)
    assert algo("feddyn").p == {"alpha": 0.01}
    assert algo("fedprox", mu="1e-3").p == {"mu": 0.001}  # YAML reads 1e-3 as a string
    with pytest.raises(
        ConfigError, match=r"algorithm 'feddyn': unknown parameter 'beta'; valid: \['alpha'\]"
    ):
        algo("feddyn", beta=1)
    with pytest.raises(ConfigError, match=r"feddyn alpha=0.0 invalid; must be float > 0"):
        algo("feddyn", alpha=0)
    with pytest.raises(
        ConfigError, match=r"algorithm 'scaffold': unknown parameter 'mu'; valid: \[\]"
    ):
        algo("scaffold", mu=0.1)
    with pytest.raises(ConfigError, match="unknown value 'fedsgd'"):
        build_config(flat={"algorithm": "fedsgd"})
    cfg = build_config(flat={"algorithm": "fedprox", "algorithm_params": {"mu": 0.5}})
    assert make_algorithm(cfg.algorithm).p["mu"] == 0.5


# ------------------------------------------------------------ hand-worked quadratic clients


def local_steps(
    a: Algorithm,
    x0: torch.Tensor,
    target: torch.Tensor,
    state: dict[str, torch.Tensor],
    shared: dict[str, torch.Tensor],
    lr: float,
    steps: int,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """SGD on the client objective whose data term is 0.5 ||theta - target||^2 (a stand-in
    for the cross-entropy), then the algorithm's finish."""
    flat = x0.clone().requires_grad_(True)
    empty = torch.zeros(0)
    for _ in range(steps):
        ce = 0.5 * ((flat - target) ** 2).sum()
        s = Step(
            {},
            flat,
            empty,
            empty,
            empty,
            empty,
            empty,
            ce,
            x0,
            {},
            state,
            shared,
            lambda p, x: None,
        )
        (g,) = torch.autograd.grad(a.client_loss(s), flat)
        flat = (flat - lr * g).detach().requires_grad_(True)
    out = a.client_finish(Finish(flat.detach(), x0, state, shared, torch.tensor(float(steps)), lr))
    return flat.detach(), out


def test_feddyn_client_by_hand() -> None:
    """theta_g = (0, 0), data optimum a = (1, 2), g_k = (0.5, -0.5), alpha = 0.1, lr = 0.5.

    grad = (theta - a) - g_k + alpha (theta - theta_g)
    step 1 at (0, 0): (-1.5, -1.5)        -> theta1 = (0.75, 0.75)
    step 2: (-0.25 - 0.5 + 0.075, -1.25 + 0.5 + 0.075) = (-0.675, -0.675)
                                          -> theta2 = (1.0875, 1.0875)
    g_k <- g_k - alpha (theta2 - theta_g) = (0.39125, -0.60875)
    """
    a = algo("feddyn", alpha=0.1)
    theta, out = local_steps(
        a, torch.zeros(2), torch.tensor([1.0, 2.0]), {"grad": torch.tensor([0.5, -0.5])}, {}, 0.5, 2
    )
    torch.testing.assert_close(theta, torch.tensor([1.0875, 1.0875]))
    torch.testing.assert_close(out["grad"], torch.tensor([0.39125, -0.60875]))
    assert set(out) == set(a.client_state) == {"grad"}


def test_feddyn_server_by_hand() -> None:
    """N = 4, two rows kept, alpha = 0.1, h = (0.2, 0), defended mean delta = (1, 2):
    h <- h - alpha (2/4) delta = (0.15, -0.1); theta <- theta + delta - h / alpha = (-0.5, 3)."""
    a = algo("feddyn", alpha=0.1)
    server = {"h": torch.tensor([0.2, 0.0])}
    new = a.server_update(
        ServerRound(
            0,
            torch.zeros(2),
            torch.tensor([1.0, 2.0]),
            np.array([3, 1]),
            np.array([True, True]),
            np.array([0.5, 0.5]),
            {},
            server,
            4,
        )
    )
    torch.testing.assert_close(server["h"], torch.tensor([0.15, -0.1]))
    torch.testing.assert_close(new, torch.tensor([-0.5, 3.0]))
    # nothing kept: model and h stay
    same = a.server_update(
        ServerRound(
            1, new, torch.zeros(2), np.array([3]), np.array([False]), np.zeros(1), {}, server, 4
        )
    )
    torch.testing.assert_close(same, new)
    torch.testing.assert_close(server["h"], torch.tensor([0.15, -0.1]))


def test_scaffold_client_by_hand() -> None:
    """x = (0, 0), a = (1, 2), c = (0.2, -0.2), c_i = (0.1, 0.1), lr = 0.5, K = 2.

    grad = (y - a) + (c - c_i) = (y - a) + (0.1, -0.3)
    step 1: (-0.9, -2.3) -> y1 = (0.45, 1.15); step 2: (-0.45, -1.15) -> y2 = (0.675, 1.725)
    option II: c_i+ = c_i - c + (x - y2) / (K lr) = (-0.1, 0.3) + (-0.675, -1.725)
             = (-0.775, -1.425); delta_c = c_i+ - c_i = (-0.875, -1.525)
    """
    a = algo("scaffold")
    y, out = local_steps(
        a,
        torch.zeros(2),
        torch.tensor([1.0, 2.0]),
        {"c": torch.tensor([0.1, 0.1])},
        {"c": torch.tensor([0.2, -0.2])},
        0.5,
        2,
    )
    torch.testing.assert_close(y, torch.tensor([0.675, 1.725]))
    torch.testing.assert_close(out["c"], torch.tensor([-0.775, -1.425]))
    torch.testing.assert_close(out["delta_c"], torch.tensor([-0.875, -1.525]))


def test_scaffold_server_by_hand() -> None:
    """c = (0.2, -0.2), N = 4, delta_c rows (-0.875, -1.525) and (0.475, 0.125):
    both kept: c + sum / 4 = (0.1, -0.55); only the first kept: (-0.01875, -0.58125).
    The model moves by server_lr x the defended aggregate."""
    a = algo("scaffold")
    dc = torch.tensor([[-0.875, -1.525], [0.475, 0.125]])
    for kept, want in (([True, True], [0.1, -0.55]), ([True, False], [-0.01875, -0.58125])):
        server = {"c": torch.tensor([0.2, -0.2])}
        new = a.server_update(
            ServerRound(
                0,
                torch.ones(2),
                torch.tensor([0.5, -1.0]),
                np.array([1, 2]),
                np.array(kept),
                np.ones(2) / 2,
                {"delta_c": dc},
                server,
                4,
            )
        )
        torch.testing.assert_close(server["c"], torch.tensor(want))
        torch.testing.assert_close(new, torch.tensor([1.5, 0.0]))


# ------------------------------------------------------------- the trainer runs every step


def _setup(
    norm: str = "none", algorithm: Algorithm | None = None
) -> tuple[torch.nn.Module, FlatLayout, torch.Tensor, torch.Tensor, torch.Tensor]:
    """An 8x8 MLP (with the algorithm's added layers, if any) and 60 random samples."""
    ext = (
        algorithm
        if algorithm is not None and type(algorithm).extend_model is not Algorithm.extend_model
        else None
    )
    model = ModelSpec("mlp", (1, 8, 8), 10, hidden=16, norm=norm, extension=ext).build(seed=0)
    layout = FlatLayout(model)
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(60, 1, 8, 8, generator=gen)
    y = torch.randint(0, 10, (60,), generator=gen)
    return model, layout, layout.flatten(model), x, y


PARAMS = {"fedprox": {"mu": 0.1}, "feddyn": {"alpha": 0.1}}


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_vectorized_equals_sequential_every_algorithm(name: str, momentum: float) -> None:
    a = algo(name, **PARAMS.get(name, {}))
    model, layout, g, x, y = _setup(algorithm=a)
    idx = [np.arange(0, 5), np.arange(5, 17), np.arange(17, 37), np.arange(37, 45)]
    gen = torch.Generator().manual_seed(1)
    n = layout.num_params
    state = {
        t: 0.01 * torch.randn(4, a.state_entries(t, layout, 12 * 10), generator=gen)
        for t in a.client_state  # 12 public images
    }
    init = a.init_server(g, n)
    shared = {t: init[t] + 0.01 * torch.randn(init[t].shape, generator=gen) for t in a.sends}
    if a.uses_public:
        shared[PUBLIC_INPUTS] = torch.rand(12, 1, 8, 8, generator=gen)
        state = {t: v.abs() for t, v in state.items()}  # targets: non-negative
    spec = LocalSpec(lr=0.1, batch_size=10, weight_decay=0.001, step=a, momentum=momentum)
    kw = dict(state=state, shared=shared)
    vec = train_clients(
        model, layout, g, x, y, idx, [1, 2, 1, 0], [1, 2, 3, 4], spec, vectorize=True, **kw
    )
    seq = train_clients(
        model, layout, g, x, y, idx, [1, 2, 1, 0], [1, 2, 3, 4], spec, vectorize=False, **kw
    )
    torch.testing.assert_close(vec.updates, seq.updates, rtol=0, atol=1e-5)
    np.testing.assert_allclose(vec.losses, seq.losses, rtol=0, atol=1e-5)
    assert set(vec.outputs) == set(seq.outputs)
    for k in vec.outputs:
        torch.testing.assert_close(vec.outputs[k], seq.outputs[k], rtol=0, atol=1e-5)
    assert torch.count_nonzero(vec.updates[3]) == 0  # the client with no work
    for t in a.client_state:  # ... keeps its state
        torch.testing.assert_close(vec.outputs[t][3], state[t][3])


@pytest.mark.parametrize("momentum, wd", [(0.9, 0.0), (0.5, 0.01)])
def test_momentum_matches_plain_pytorch_sgd(momentum: float, wd: float) -> None:
    """The trainer's SGD equals torch.optim.SGD(lr, momentum, weight_decay) on the same
    schedule (variable-size last batch)."""
    model, layout, g, x, y = _setup()
    n, epochs, bs = 23, 2, 10
    out = train_clients(
        model,
        layout,
        g,
        x,
        y,
        [np.arange(n)],
        [epochs],
        [7],
        LocalSpec(lr=0.1, batch_size=bs, weight_decay=wd, momentum=momentum),
    )
    idx, mask = make_schedule([n], [epochs], [7], bs)
    ref = ModelSpec("mlp", (1, 8, 8), 10, hidden=16).build(seed=0)
    opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=momentum, weight_decay=wd)
    for s in range(idx.shape[1]):
        rows = idx[0, s][mask[0, s] > 0]
        opt.zero_grad()
        F.cross_entropy(ref(x[rows]), y[rows]).backward()
        opt.step()
    torch.testing.assert_close(out.updates[0], layout.flatten(ref) - g, rtol=0, atol=1e-5)


# ----------------------------------------------------------------- parameters kept locally


class KeepNorm(Algorithm):
    """Test algorithm: BatchNorm entries stay on the clients (what FedBN does)."""

    name = "keepnorm_test"

    def local_parameters(self, names: list[str]) -> list[str]:
        return [n for n in names if n.startswith("body.2.")]


@pytest.fixture
def keepnorm() -> Iterator[None]:
    register(KeepNorm)
    yield
    del ALGORITHMS["keepnorm_test"]


def test_local_parameters_stay_on_clients(keepnorm: None, tmp_path: Any) -> None:
    """Rows hold only the shared entries; the BatchNorm entries are never aggregated (the global
    ones stay at their initial values) and each client continues from its own."""
    from simulator.round.engine import Simulation

    cfg = build_config(
        flat={
            "backend": "local",
            "num_clients": 4,
            "clients_per_round": 4,
            "rounds": 2,
            "local_epochs": 1,
            "batch_size": 16,
            "hidden": 16,
            "norm": "batch",
            "partition": "iid",
            "algorithm": "keepnorm_test",
            "defense": "median",
            "progress": False,
            "plots": False,
            "out": str(tmp_path),
        }
    )
    sim = Simulation(cfg)
    try:
        g0 = sim.global_flat.clone()
        local = torch.from_numpy(sim.space.local)
        assert len(local) == 4 * 16  # weight, bias, running mean and variance
        rec = sim.run_round(0, 0.0)
        assert rec.rows is not None and rec.rows.updates.shape[1] == sim.space.size
        assert sim.space.size == sim.fed.layout.size - len(local)
        assert torch.equal(sim.global_flat[local], g0[local])
        assert not torch.equal(sim.global_flat, g0)
        first, present = sim.store.get("local", np.arange(4))
        assert present.all() and not np.allclose(first, g0[local].numpy())
        sim.run_round(1, 0.0)
        second, _ = sim.store.get("local", np.arange(4))
        assert not np.allclose(second, first)  # trained on from each client's own values
    finally:
        sim.close()
