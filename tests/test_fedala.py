"""FedALA: one weight step worked by hand on 3 head entries, the first-round stop rule, the
closed-form head gradient against autograd, vectorized == sequential over mixed phases, and
engine runs (personal evaluation, resume with a spilling store, 10^5 virtual devices)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import small_config
from torch.func import functional_call

from simulator.algorithms import make_algorithm
from simulator.algorithms.fedala import LOCAL, PHASE, WEIGHTS, FedALA, ala_sample, layers, settled
from simulator.config.fields import ConfigError
from simulator.config.learning import AlgorithmConfig
from simulator.training.client_step import splitter
from simulator.training.flat import FlatLayout
from simulator.training.models import ModelSpec
from simulator.training.spec import LocalSpec
from simulator.training.stacked import train_clients
from simulator.training.step import Start


def fedala(**params: Any) -> FedALA:
    a = make_algorithm(AlgorithmConfig(algorithm="fedala", algorithm_params=params))
    assert isinstance(a, FedALA)
    return a


# -------------------------------------------------- a stand-in model: 2 body + 3 head entries


def split5(flat: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"body.w": flat[:2], "head.w": flat[2:]}


def head_dot(offset: float) -> Any:
    """Logits ``[x . head.w, offset]`` per row (the body entries unused)."""

    def forward(p: dict[str, torch.Tensor], x: torch.Tensor) -> tuple[None, torch.Tensor]:
        z = x @ p["head.w"] + 0.0 * p["body.w"].sum()
        return None, torch.stack([z, torch.full_like(z, offset)], dim=-1)

    return forward


def start_of(
    flat: torch.Tensor,
    local: torch.Tensor,
    w: torch.Tensor,
    phase: float,
    x: torch.Tensor,
    y: torch.Tensor,
    mask: torch.Tensor,
    iterations: int,
    offset: float = 0.0,
) -> Start:
    state = {LOCAL: local, WEIGHTS: w, PHASE: torch.tensor([phase])}
    return Start(flat, flat, state, {}, x, y, mask, head_dot(offset), split5, iterations)


def test_one_weight_step_by_hand() -> None:
    """Global [0.5, -0.5 | 1, 0, -1], local [9, 9 | 3, 1, 0], W = 1 (phase 2: one epoch).
    s = 50 of 2 samples -> the first one only: x = [1, 1, 1], label 0. Theta_hat(W=1) is the
    global head, z = x . [1, 0, -1] = 0, logits [0, 0]: dCE/dz = -0.5, dL/dTheta_hat =
    [-0.5, -0.5, -0.5], times (global - local) = [-2, -1, -1]: dL/dW = [1, 0.5, 0.5].
    eta = 1.5: W = [1, 1, 1] - [1.5, 0.75, 0.75] = [-0.5, 0.25, 0.25], clipped to
    [0, 0.25, 0.25]; Theta_hat = [3, 1, 0] + [-2, -1, -1] * W = [3, 0.75, -0.25]; the lower
    layer takes the global values [0.5, -0.5] (not the local 9s). (The second sample,
    [5, -3, 2] with label 1, would give another gradient if it were in the sample.)"""
    a = fedala(s=50, eta=1.5)
    flat = torch.tensor([0.5, -0.5, 1.0, 0.0, -1.0])
    local = torch.tensor([9.0, 9.0, 3.0, 1.0, 0.0])
    w = torch.ones(3)
    x = torch.tensor([[[1.0, 1.0, 1.0], [5.0, -3.0, 2.0]]])
    y, mask = torch.tensor([[0, 1]]), torch.ones(1, 2)
    start, rows = a.client_start(start_of(flat, local, w, 2.0, x, y, mask, 1))
    torch.testing.assert_close(start, torch.tensor([0.5, -0.5, 3.0, 0.75, -0.25]))
    torch.testing.assert_close(rows[WEIGHTS], torch.tensor([0.0, 0.25, 0.25]))
    # the gradient itself, before the step
    step = a.w_step(
        start_of(flat, local, w, 2.0, x, y, mask, 1),
        split5(flat),
        ["head.w"],
        local[2:],
        flat[2:] - local[2:],
        ala_sample(mask, 50),
        True,
    )
    g, value = step(torch.ones(3), 0)
    torch.testing.assert_close(g, torch.tensor([1.0, 0.5, 0.5]))
    assert value.item() == pytest.approx(math.log(2), abs=1e-6)


def test_never_trained_and_first_round_clients() -> None:
    """Phase 0 (no local model): the start is the global model and W = 1. Phase 1: W starts at
    1 whatever is stored (the paper's initialisation in the first ALA round)."""
    a = fedala(s=100, eta=1.5)
    flat = torch.tensor([0.5, -0.5, 1.0, 0.0, -1.0])
    local = torch.tensor([9.0, 9.0, 3.0, 1.0, 0.0])
    stored = torch.tensor([0.3, 0.3, 0.3])
    x, y, mask = torch.tensor([[[1.0, 1.0, 1.0]]]), torch.tensor([[0]]), torch.ones(1, 1)
    start, rows = a.client_start(start_of(flat, local, stored, 0.0, x, y, mask, 1))
    torch.testing.assert_close(start, flat)
    torch.testing.assert_close(rows[WEIGHTS], torch.ones(3))
    # phase 1 with one epoch allowed: the same step as by hand, from W = 1 (not 0.3)
    _, rows = a.client_start(start_of(flat, local, stored, 1.0, x, y, mask, 1))
    torch.testing.assert_close(rows[WEIGHTS], torch.tensor([0.0, 0.25, 0.25]))


def test_ala_sample_is_the_first_share_of_the_epoch_order() -> None:
    """7 samples over batches of 3 (the last batch padded): s = 80 -> floor(5.6) = 5."""
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 1], [1, 0, 0]])
    want = torch.tensor([[1.0, 1, 1], [1, 1, 0], [0, 0, 0]])
    torch.testing.assert_close(ala_sample(mask, 80), want)
    torch.testing.assert_close(ala_sample(mask, 100), mask)
    assert ala_sample(torch.tensor([[1.0, 0.0]]), 80).sum() == 0  # floor(0.8) = 0


def test_stop_rule_by_hand() -> None:
    """More than 10 losses and the population std of the last 10 below 0.1."""
    flat = [torch.tensor(0.7)] * 10
    assert not bool(settled(flat))  # 10 losses: too few
    assert bool(settled(flat + [torch.tensor(0.7)]))
    # alternating 0 and 0.25: std 0.125; 0 and 0.19: std 0.095
    assert not bool(settled([torch.tensor(0.25 * (i % 2)) for i in range(11)]))
    assert bool(settled([torch.tensor(0.19 * (i % 2)) for i in range(11)]))
    # a spread early on no longer counts once it leaves the window of the last 10
    assert bool(settled([torch.tensor(5.0)] + [torch.tensor(1.0)] * 10))


def test_first_round_trains_until_the_stop_rule() -> None:
    """Logits [x . Theta_hat, 30] with label 0: CE = 30 - z, dCE/dz = -1 exactly. x = [1, 1, 0],
    global head [0, 0, 0], local [1, 0.001, 0] -> global - local = [-1, -0.001, 0] and
    dL/dW = [1, 0.001, 0]: with eta = 0.25, W_0 falls 0.25 an epoch to 0 (the loss falls
    0.25 an epoch, then constant), W_1 0.00025 an epoch. The losses are
    +1, .75, .5, .25, 0, 0, ... over 29: the std of the last 10 is 0.255 after 11 epochs,
    0.16 after 12, 0.075 after 13, so the first ALA round takes 13 epochs:
    W_1 = 1 - 13 * 0.00025 = 0.99675. A cap of 12 stops it at 12 epochs; the next rounds
    (phase 2) take one epoch from the stored W."""
    a = fedala(s=100, eta=0.25, cap=20)
    flat = torch.zeros(5)
    local = torch.tensor([0.0, 0.0, 1.0, 0.001, 0.0])
    x, y, mask = torch.tensor([[[1.0, 1.0, 0.0]]]), torch.tensor([[0]]), torch.ones(1, 1)

    def w_after(phase: float, iterations: int, cap: int = 20) -> torch.Tensor:
        b = fedala(s=100, eta=0.25, cap=cap)
        s = start_of(flat, local, torch.ones(3), phase, x, y, mask, iterations, offset=30.0)
        return b.client_start(s)[1][WEIGHTS]

    torch.testing.assert_close(w_after(1.0, 20), torch.tensor([0.0, 1 - 13 * 0.00025, 1.0]))
    torch.testing.assert_close(w_after(1.0, 12, cap=12), torch.tensor([0.0, 0.997, 1.0]))
    torch.testing.assert_close(w_after(2.0, 20), torch.tensor([0.75, 0.99975, 1.0]))
    # start_iterations: the cap only where a client of the chunk is in its first ALA round
    phase = {PHASE: torch.tensor([[0.0], [2.0], [1.0]])}
    assert a.start_iterations(phase) == 20
    assert a.start_iterations({PHASE: torch.tensor([[0.0], [2.0]])}) == 1
    assert a.start_iterations({PHASE: torch.tensor([[0.0], [0.0]])}) == 0


def test_closed_form_head_gradient_equals_autograd() -> None:
    """On the real MLP, p = 1 (the head): the closed-form dL/dW of a batch equals autograd's
    through the model with Theta_hat = local + (global - local) * W on the head."""
    model = ModelSpec("mlp", (1, 8, 8), 10, hidden=16).build(seed=0)
    layout = FlatLayout(model)
    split = splitter(layout)
    gen = torch.Generator().manual_seed(0)
    g = layout.flatten(model)
    n = layout.num_params
    local = g[:n] + 0.3 * torch.randn(n, generator=gen)
    x = torch.rand(2, 5, 1, 8, 8, generator=gen)
    y = torch.randint(0, 10, (2, 5), generator=gen)
    mask = torch.tensor([[1.0] * 5, [1, 1, 1, 0, 0]])
    cut = n - 170  # head: 10 x 16 weights and 10 biases
    w = torch.rand(170, generator=gen)

    def forward(p: dict[str, torch.Tensor], xx: torch.Tensor) -> Any:
        return functional_call(model, p, (xx,), {"with_features": True})

    s = Start(g[:n], g[:n], {}, {}, x, y, mask, forward, split, 1)
    parts = split(g[:n])
    top = ["head.weight", "head.bias"]
    sample = ala_sample(mask, 80)  # 6 of 8 samples: batch 1 keeps one
    step = FedALA.w_step(s, parts, top, local[cut:], g[cut:n] - local[cut:], sample, True)
    for b in (0, 1):
        got, value = step(w, b)
        wv = w.clone().requires_grad_(True)
        hat = torch.cat([g[:cut], local[cut:] + (g[cut:n] - local[cut:]) * wv])
        ce = F.cross_entropy(forward(split(hat), x[b])[1], y[b], reduction="none")
        loss = (ce * sample[b]).sum() / sample[b].sum()
        (want,) = torch.autograd.grad(loss, wv)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
        assert value.item() == pytest.approx(loss.item(), abs=1e-6)


def test_layers_and_parameters() -> None:
    names = ["body.1.weight", "body.1.bias", "body.4.weight", "body.4.bias", "head.weight"]
    assert layers(names + ["head.bias"]) == ["body.1", "body.4", "head"]
    assert fedala().p == {"s": 80, "p": 1, "eta": 1.0, "cap": 20}
    assert fedala().local_parameters(names + ["head.bias"]) == []
    # W's table: the top layers' entries (8x8 MLP, hidden 16: head 16 x 10 + 10 = 170, with
    # body.4 another 16 x 16 + 16 = 272)
    layout = FlatLayout(ModelSpec("mlp", (1, 8, 8), 10, hidden=16).build(seed=0))
    assert fedala().weighted_size(layout) == 170
    assert fedala(p=2).weighted_size(layout) == 442
    assert fedala(p=2).client_state[WEIGHTS](layout) == 442
    with pytest.raises(ConfigError, match=r"fedala p=4 invalid; the model has 3 layers"):
        fedala(p=4).local_parameters(names + ["head.bias"])
    with pytest.raises(ConfigError, match=r"fedala s=0 invalid; must be int in \[1, 100\]"):
        fedala(s=0)
    with pytest.raises(
        ConfigError, match=r"algorithm 'fedala': unknown parameter 'rate'; valid: \['cap', 'eta'"
    ):
        fedala(rate=1)


# ------------------------------------------------------------------------------ the trainer


@pytest.mark.parametrize("p", [1, 2])
def test_vectorized_equals_sequential_over_mixed_phases(p: int) -> None:
    """Four clients in phases 0, 1, 2, 2 (epochs 1, 2, 1, 0): both paths agree to 1e-5 (the
    chunk runs the cap's epochs, the phase-2 client is frozen after one); the client without
    epochs keeps its rows and uploads nothing; p = 2 (two layers) goes through autograd."""
    model = ModelSpec("mlp", (1, 8, 8), 10, hidden=16).build(seed=0)
    layout = FlatLayout(model)
    gen = torch.Generator().manual_seed(0)
    g = layout.flatten(model)
    n = layout.num_params
    x, y = torch.rand(60, 1, 8, 8, generator=gen), torch.randint(0, 10, (60,), generator=gen)
    idx = [np.arange(0, 5), np.arange(5, 17), np.arange(17, 37), np.arange(37, 45)]
    state = {
        LOCAL: g[:n] + 0.2 * torch.randn(4, n, generator=gen),
        WEIGHTS: torch.rand(4, fedala(p=p).weighted_size(layout), generator=gen),
        PHASE: torch.tensor([[0.0], [1.0], [2.0], [2.0]]),
    }
    spec = LocalSpec(lr=0.1, batch_size=10, step=fedala(p=p, cap=12))
    out = [
        train_clients(
            model, layout, g, x, y, idx, [1, 2, 1, 0], [1, 2, 3, 4], spec, vectorize=v, state=state
        )
        for v in (True, False)
    ]
    torch.testing.assert_close(out[0].updates, out[1].updates, rtol=0, atol=1e-5)
    for k in (LOCAL, WEIGHTS, PHASE):
        torch.testing.assert_close(out[0].outputs[k], out[1].outputs[k], rtol=0, atol=1e-5)
    o = out[0].outputs
    torch.testing.assert_close(o[PHASE], torch.tensor([[1.0], [2.0], [2.0], [2.0]]))
    torch.testing.assert_close(o[LOCAL][:3], g[:n] + out[0].updates[:3, :n])  # trained
    for k in (LOCAL, WEIGHTS, PHASE):
        torch.testing.assert_close(o[k][3], state[k][3], rtol=0, atol=0)
    assert torch.count_nonzero(out[0].updates[3]) == 0
    assert bool((o[WEIGHTS][1:3] != state[WEIGHTS][1:3]).any())  # ALA moved phases 1 and 2


# ------------------------------------------------------------------------------- the engine

RUN = {
    "dataset": "digits",
    "partition": "shards",
    "classes_per_client": 2,
    "client_test_fraction": 0.25,
    "algorithm": "fedala",
}


def test_client_accuracy_comes_from_the_local_models(tmp_path: Path) -> None:
    from simulator.round.engine import Simulation
    from simulator.training.flat import evaluate

    sim = Simulation(small_config(tmp_path, **RUN, num_clients=6, clients_per_round=3))
    try:
        for r in range(3):
            rec = sim.run_round(r, 0.0)
        assert sim.store.tables[WEIGHTS][0] == (170,)  # hidden 16: the head's entries
        ev, f = sim.client_eval, sim.fed
        rows, present = sim.store.get(LOCAL, ev.clients)
        phase, _ = sim.store.get(PHASE, ev.clients)
        assert 0 < present.sum() and bool((phase[present] >= 1).all())
        data = f.arrays(f.local_test, ev.clients, f.local_test_pool)
        acc = []
        for i, (xi, yi) in enumerate(data):
            flat = sim.global_flat if not present[i] else torch.from_numpy(rows[i])
            acc.append(
                evaluate(f.model, f.layout, flat, torch.from_numpy(xi), torch.from_numpy(yi))[0]
            )
        assert rec.extra["client_accuracy_mean"] == pytest.approx(np.mean(acc), abs=1e-12)
    finally:
        sim.close()


def test_resume_with_a_spilling_store_is_bitwise(tmp_path: Path) -> None:
    """150 virtual devices, 50 a round, a 300 kB store (rows spill): a run killed after round 2
    and resumed ends with the events, global model and client rows of one never interrupted;
    clients trained twice ran ALA from rows read back."""
    from simulator.run.experiment import resume_config, run_experiment
    from simulator.run.output import read_events

    over = {
        **RUN,
        "partition": "virtual",
        "algorithm_params": {"cap": 12},
        "num_clients": 150,
        "clients_per_round": 50,
        "rounds": 4,
        "checkpoint_every": 1,
        "state_memory": "300kB",
        "eval_clients": 20,
        "virtual_size_median": 24.0,
        "virtual_size_max": 64,
    }
    crashed = small_config(tmp_path / "crashed", **over)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(crashed, crash_after=2)
    run_experiment(resume_config(crashed.output.out))
    full = small_config(tmp_path / "full", **over)
    summary = run_experiment(full)
    strip = ("wall_time", "slowest_train_seconds", "chunks", "placement")
    ev = [
        [
            {k: v for k, v in e.items() if k not in strip}
            for e in read_events(Path(c.output.out) / "events.jsonl")
        ]
        for c in (crashed, full)
    ]
    assert ev[0] == ev[1] and len(ev[0]) == 4
    assert summary["state_store"]["disk_bytes"] > 0
    ck = [
        torch.load(Path(c.output.out) / "checkpoint.pt", weights_only=False)
        for c in (crashed, full)
    ]
    assert torch.equal(ck[0]["global"], ck[1]["global"])
    seen = [c for e in ev[1] for c in e["selected"]]
    assert len(seen) > len(set(seen))  # some clients trained twice or more: ALA ran


def test_runs_at_1e5_virtual_devices(tmp_path: Path) -> None:
    from simulator.run.experiment import run_experiment
    from simulator.run.output import read_events

    cfg = small_config(
        tmp_path,
        **{**RUN, "partition": "virtual"},
        num_clients=100_000,
        clients_per_round=50,
        rounds=3,
        state_memory="300KB",
        eval_clients=20,
    )
    s = run_experiment(cfg)
    assert s["rounds"] == 3 and np.isfinite(s["final_accuracy"])
    trained = {c for e in read_events(Path(cfg.output.out) / "events.jsonl") for c in e["selected"]}
    assert len(trained) > 100
    assert s["state_store"]["clients"] == 3 * len(trained)  # rows in the 3 tables
    assert s["state_store"]["disk_bytes"] > 0  # 300 KB holds ~45 clients' rows: it spilled
