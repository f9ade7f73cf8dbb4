"""Ditto: the personal update worked by hand on 3-element vectors, the trainer's personal model
against a plain PyTorch loop, vectorized == sequential, and engine runs whose per-client accuracy
comes from the personal models (with a resume check)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from simulator.algorithms import make_algorithm
from simulator.algorithms.ditto import Ditto
from simulator.config.fields import ConfigError
from simulator.config.learning import AlgorithmConfig
from simulator.config.sections import build_config
from simulator.training.flat import FlatLayout, evaluate
from simulator.training.models import ModelSpec
from simulator.training.spec import LocalSpec, make_schedule
from simulator.training.stacked import train_clients
from simulator.training.step import Step


def ditto(**params: Any) -> Ditto:
    a = make_algorithm(AlgorithmConfig(algorithm="ditto", algorithm_params=params))
    assert isinstance(a, Ditto)
    return a


# ---------------------------------------------------------------- by hand, 3-element vectors


def sum_logit_forward(p: dict[str, torch.Tensor], x: torch.Tensor) -> tuple[None, torch.Tensor]:
    """A stand-in model: every row's logits are ``[sum(w), 0]``."""
    z = p["w"].sum()
    return None, torch.stack([z.expand(len(x)), torch.zeros(len(x))], dim=-1)


def step_of(
    a: Ditto, flat: torch.Tensor, v: torch.Tensor, g: torch.Tensor, target: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Loss and gradients of Ditto's objective on a 2-row batch (labels 0, 1; the second row
    padding), the global model's data term a stand-in 0.5||w - target||^2."""
    flat = flat.clone().requires_grad_(True)
    v = v.clone().requires_grad_(True)
    x, y, mask = torch.zeros(2, 1), torch.tensor([0, 1]), torch.tensor([1.0, 0.0])
    ce = 0.5 * ((flat - target) ** 2).sum()
    s = Step(
        {"w": flat},
        flat,
        x,
        y,
        mask,
        torch.zeros(0),
        torch.zeros(0),
        ce,
        g,
        {"w": g},
        {},
        {},
        sum_logit_forward,
        {"personal": v},
    )
    loss = a.client_loss(s)
    gw, gv = torch.autograd.grad(loss, (flat, v))
    return loss.detach(), gw, gv


def test_personal_step_by_hand() -> None:
    """v = [1, -2, 1] sums to 0, so the real row's logits are [0, 0]: CE = ln 2 and
    dCE/dv_i = sigma(0) - 1 = -0.5 (the padded row, label 1, would add +0.5 if counted).
    With w^t = 0 and lambda = 1 the proximal gradient is v itself, so grad_v = [0.5, -2.5, 0.5]
    and one step of lr 0.1 gives v = [0.95, -1.75, 0.95]. The global model's gradient is its own
    data term only (w - target = [1, 1, 1] - [1, 2, 3])."""
    a = ditto(lam=1.0)
    g = torch.zeros(3)
    loss, gw, gv = step_of(
        a, torch.ones(3), torch.tensor([1.0, -2.0, 1.0]), g, torch.tensor([1.0, 2.0, 3.0])
    )
    # 0.5 * (0 + 1 + 4) + ln 2 + 0.5 * (1 + 4 + 1)
    assert loss.item() == pytest.approx(2.5 + math.log(2) + 3.0, abs=1e-6)
    torch.testing.assert_close(gw, torch.tensor([0.0, -1.0, -2.0]))
    torch.testing.assert_close(gv, torch.tensor([0.5, -2.5, 0.5]))
    v1 = torch.tensor([1.0, -2.0, 1.0]) - 0.1 * gv
    torch.testing.assert_close(v1, torch.tensor([0.95, -1.75, 0.95]))


def test_personal_model_contracts_to_the_global_one_on_a_quadratic() -> None:
    """With logits that do not depend on v (no data gradient), SGD on the proximal term alone
    gives v_S = w^t + (v_0 - w^t)(1 - lr lambda)^S: lambda 2, lr 0.1, v_0 = [1, 2, 3],
    w^t = [1, 0, -1], S = 3 -> w^t + [0, 2, 4] * 0.8^3 = [1, 1.024, 1.048]."""
    a = ditto(lam=2.0)
    g = torch.tensor([1.0, 0.0, -1.0])
    v = torch.tensor([1.0, 2.0, 3.0])

    def const_forward(p: dict[str, torch.Tensor], x: torch.Tensor) -> tuple[None, torch.Tensor]:
        return None, torch.zeros(len(x), 2) + 0.0 * p["w"].sum()

    for _ in range(3):
        vv = v.clone().requires_grad_(True)
        s = Step(
            {"w": g},
            g,
            torch.zeros(2, 1),
            torch.tensor([0, 1]),
            torch.ones(2),
            torch.zeros(0),
            torch.zeros(0),
            torch.zeros(()),
            g,
            {"w": g},
            {},
            {},
            const_forward,
            {"personal": vv},
        )
        (gv,) = torch.autograd.grad(a.client_loss(s), vv)
        v = v - 0.1 * gv
    torch.testing.assert_close(v, torch.tensor([1.0, 1.024, 1.048]))


def test_start_is_the_global_model_for_a_never_trained_client() -> None:
    a = ditto()
    g = torch.tensor([1.0, 2.0, 3.0])
    torch.testing.assert_close(a.trainable_start("personal", torch.zeros(3), g), g)
    row = torch.tensor([0.0, 5.0, 0.0])
    torch.testing.assert_close(a.trainable_start("personal", row, g), row)
    # the evaluation model: the row's parameters, then the global buffers (here: [9, 8])
    full = torch.tensor([1.0, 2.0, 3.0, 9.0, 8.0])
    torch.testing.assert_close(a.personal_model(full, row), torch.tensor([0.0, 5.0, 0.0, 9, 8]))
    torch.testing.assert_close(a.personal_model(full, torch.zeros(3)), full)


def test_parameters_are_checked() -> None:
    assert ditto().p == {"lam": 1.0}
    with pytest.raises(ConfigError, match=r"ditto lam=-1.0 invalid; must be float >= 0"):
        ditto(lam=-1.0)
    with pytest.raises(
        ConfigError, match=r"algorithm 'ditto': unknown parameter 'mu'; valid: \['lam'\]"
    ):
        ditto(mu=1.0)
    assert ditto().local_parameters(["body.1.weight", "head.bias"]) == []


# ------------------------------------------------------------------------------ the trainer

IDX = [np.arange(0, 5), np.arange(5, 17), np.arange(17, 37), np.arange(37, 45)]


def setup() -> tuple[torch.nn.Module, FlatLayout, torch.Tensor, torch.Tensor, torch.Tensor]:
    model = ModelSpec("mlp", (1, 8, 8), 10, hidden=16).build(seed=0)
    layout = FlatLayout(model)
    gen = torch.Generator().manual_seed(0)
    return (
        model,
        layout,
        layout.flatten(model),
        torch.rand(60, 1, 8, 8, generator=gen),
        torch.randint(0, 10, (60,), generator=gen),
    )


def both(a: Ditto, state: torch.Tensor, epochs: list[int], momentum: float = 0.0) -> Any:
    model, layout, g, x, y = setup()
    spec = LocalSpec(lr=0.1, batch_size=10, step=a, momentum=momentum)
    out = [
        train_clients(
            model,
            layout,
            g,
            x,
            y,
            IDX,
            epochs,
            [1, 2, 3, 4],
            spec,
            vectorize=v,
            state={"personal": state},
        )
        for v in (True, False)
    ]
    torch.testing.assert_close(out[0].updates, out[1].updates, rtol=0, atol=1e-5)
    torch.testing.assert_close(
        out[0].outputs["personal"], out[1].outputs["personal"], rtol=0, atol=1e-5
    )
    np.testing.assert_allclose(out[0].losses, out[1].losses, rtol=0, atol=1e-5)
    return out[0]


def test_global_update_is_fedavg_and_lambda_zero_personal_model_is_the_local_model() -> None:
    """lambda = 0 and empty rows: the personal model starts at w^t and takes the same SGD steps
    on the same batches as the global model, so it ends at the FedAvg local model w^t + update;
    the update rows equal FedAvg's whatever lambda."""
    model, layout, g, x, y = setup()
    n = layout.num_params
    fedavg = train_clients(
        model, layout, g, x, y, IDX, [1, 2, 1, 0], [1, 2, 3, 4], LocalSpec(lr=0.1, batch_size=10)
    )
    out = both(ditto(lam=0.0), torch.zeros(4, n), [1, 2, 1, 0])
    torch.testing.assert_close(out.updates, fedavg.updates, rtol=0, atol=1e-6)
    torch.testing.assert_close(
        out.outputs["personal"], g[:n] + fedavg.updates[:, :n], rtol=0, atol=1e-6
    )
    out1 = both(ditto(lam=1.0), torch.zeros(4, n), [1, 2, 1, 0])
    torch.testing.assert_close(out1.updates, fedavg.updates, rtol=0, atol=1e-6)


def test_personal_model_matches_a_plain_pytorch_loop() -> None:
    """Client 1 (12 samples, 2 epochs, batch 10 -> 4 steps) from a stored personal model: the
    trainer's result equals torch.optim.SGD on CE(v) + (lambda/2)||v - w^t||^2 over the same
    schedule."""
    model, layout, g, x, y = setup()
    n, lam = layout.num_params, 0.5
    gen = torch.Generator().manual_seed(3)
    state = torch.zeros(4, n)
    state[1] = g[:n] + 0.05 * torch.randn(n, generator=gen)
    out = both(ditto(lam=lam), state, [1, 2, 1, 0], momentum=0.9)
    ref = ModelSpec("mlp", (1, 8, 8), 10, hidden=16).build(seed=0)
    layout.load(ref, torch.cat([state[1], g[n:]]))
    opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    anchor = g[:n]
    idx, mask = make_schedule([12], [2], [2], 10)
    assert idx.shape[1] == 4
    for s in range(4):
        rows = IDX[1][idx[0, s][mask[0, s] > 0]]
        opt.zero_grad()
        v = torch.cat([p.reshape(-1) for p in ref.parameters()])
        loss = F.cross_entropy(ref(x[rows]), y[rows]) + 0.5 * lam * ((v - anchor) ** 2).sum()
        loss.backward()
        opt.step()
    want = torch.cat([p.detach().reshape(-1) for p in ref.parameters()])
    torch.testing.assert_close(out.outputs["personal"][1], want, rtol=0, atol=1e-5)


def test_vectorized_equals_sequential_and_idle_rows_keep_their_start() -> None:
    """Rows 0, 2 empty, 1, 3 stored; epochs [1, 2, 0, 0]: client 2 (no steps, empty row) ends at
    the global model, client 3 (no steps, stored row) keeps its row."""
    _, layout, g, _, _ = setup()
    n = layout.num_params
    gen = torch.Generator().manual_seed(1)
    state = torch.zeros(4, n)
    state[[1, 3]] = 0.01 * torch.randn(2, n, generator=gen)
    out = both(ditto(lam=0.5), state, [1, 2, 0, 0], momentum=0.9)
    torch.testing.assert_close(out.outputs["personal"][2], g[:n], rtol=0, atol=0)
    torch.testing.assert_close(out.outputs["personal"][3], state[3], rtol=0, atol=0)
    assert not torch.allclose(out.outputs["personal"][1], state[1])


# ------------------------------------------------------------------------------- the engine

RUN = {
    "backend": "local",
    "dataset": "digits",
    "num_clients": 6,
    "clients_per_round": 3,
    "partition": "shards",
    "classes_per_client": 2,
    "client_test_fraction": 0.25,
    "local_epochs": 1,
    "batch_size": 16,
    "hidden": 16,
    "algorithm": "ditto",
    "progress": False,
    "plots": False,
}


def test_client_accuracy_comes_from_the_personal_models(tmp_path: Path) -> None:
    from simulator.round.engine import Simulation

    cfg = build_config(flat={**RUN, "rounds": 2, "defense": "median", "out": str(tmp_path)})
    sim = Simulation(cfg)
    try:
        rec = sim.run_round(0, 0.0)
        assert rec.rows is not None and rec.rows.updates.shape[1] == sim.fed.layout.size
        rec = sim.run_round(1, 0.0)
        ev, f = sim.client_eval, sim.fed
        rows, _ = sim.store.get("personal", ev.clients)
        trained = {c for c in np.flatnonzero(np.abs(rows).sum(1) > 0)}
        assert 3 <= len(trained) < len(ev.clients)  # some clients have never trained
        data = f.arrays(f.local_test, ev.clients, f.local_test_pool)
        personal, plain = [], []
        for i, (xi, yi) in enumerate(data):
            xt, yt = torch.from_numpy(xi), torch.from_numpy(yi)
            flat = sim.algorithm.personal_model(sim.global_flat, torch.from_numpy(rows[i]))
            personal.append(evaluate(f.model, f.layout, flat, xt, yt)[0])
            plain.append(evaluate(f.model, f.layout, sim.global_flat, xt, yt)[0])
            if i not in trained:
                assert personal[-1] == plain[-1]
        assert rec.extra["client_accuracy_mean"] == pytest.approx(np.mean(personal), abs=1e-12)
        assert rec.extra["client_accuracy_mean"] != pytest.approx(np.mean(plain), abs=1e-6)
    finally:
        sim.close()


def test_resume_is_bitwise_identical(tmp_path: Path) -> None:
    from simulator.run.experiment import resume_config, run_experiment
    from simulator.run.output import read_events

    flat = {**RUN, "rounds": 3, "checkpoint_every": 1}
    crashed = build_config(flat={**flat, "out": str(tmp_path / "crashed")})
    with pytest.raises(KeyboardInterrupt):
        run_experiment(crashed, crash_after=2)
    out = tmp_path / "crashed"
    run_experiment(resume_config(out))
    full = build_config(flat={**flat, "out": str(tmp_path / "full")})
    run_experiment(full)
    wall = ("wall_time", "slowest_train_seconds", "chunks", "placement")

    def strip(p: Path) -> list[dict[str, Any]]:
        return [{k: v for k, v in e.items() if k not in wall} for e in read_events(p)]

    got, want = strip(out / "events.jsonl"), strip(tmp_path / "full" / "events.jsonl")
    assert [e["round"] for e in got] == [0, 1, 2]
    assert got == want and want[-1]["client_accuracy_mean"] is not None
