"""FedVB, the multi-branch classifier: the branch aggregate of 2 clients x 3 classes, the
prediction rule and the one-vs-rest loss worked by hand, the bytes on the wire of 2 clients, the
untrained branches' rows exactly zero (weight decay and momentum included), vectorized ==
sequential, and engine runs (the case's partition, the rows reaching the server update, a
virtual population of 10^5)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import small_config

from simulator.algorithms import WireInfo, make_algorithm
from simulator.algorithms.exchange import ServerRound
from simulator.algorithms.fedvb import BRANCHES, branch_loss
from simulator.algorithms.fedvb_head import ACTIVE, BranchHead, sent_branches
from simulator.config.fields import ConfigError
from simulator.config.learning import AlgorithmConfig
from simulator.round.engine import Simulation
from simulator.state.store import ClientStore
from simulator.training.flat import FlatLayout
from simulator.training.models import ModelSpec
from simulator.training.spec import LocalSpec
from simulator.training.stacked import train_clients


def fedvb(wd: float = 0.0, **params: Any) -> Any:
    cfg = AlgorithmConfig(algorithm="fedvb", algorithm_params=params, weight_decay=wd)
    return make_algorithm(cfg)


#: a body of 2 entries, 3 logistic branches of 1 weight each, their biases, the active mask
SLICES = {
    "body.1.weight": slice(0, 2),
    "head.weight": slice(2, 5),
    "head.bias": slice(5, 8),
    "head.active": slice(8, 11),
}


def test_branch_aggregate_two_clients_three_classes_by_hand() -> None:
    """Client 4 sends branches 0 and 1, client 9 branch 0 only, nobody branch 2; FedAvg weights
    1/4 and 3/4. delta = (1/4) u_4 + (3/4) u_9; coverage = (1, 1/4, 0).
    Body (FedAvg): (2.5, 5). Branch 0 (both): w = 1 + (1/4 * 4 + 3/4 * 8) / 1 = 8, b = 1/4 * 2
    + 3/4 * (-4) = -2.5. Branch 1 (client 4 alone): w = 1 + (1/4 * 8) / (1/4) = 9 (its own
    value 1 + 8), b = (1/4 * 4) / (1/4) = 4. Branch 2 (nobody): unchanged, w = 1, b = 0."""
    a = fedvb()
    g = torch.tensor([0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    rows = torch.tensor(
        [
            [1.0, 2.0, 4.0, 8.0, 0.0, 2.0, 4.0, 0.0, 0.0, 0.0, 0.0],
            [3.0, 6.0, 8.0, 0.0, 0.0, -4.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        ]
    )
    w = np.array([0.25, 0.75])
    delta = torch.from_numpy(w).float() @ rows
    store = ClientStore(1 << 20)
    ids = np.array([4, 9])
    extras = {"classes": torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])}
    ok = np.array([True, True])
    r = ServerRound(0, g, delta, ids, ok, w, extras, {}, 10, SLICES, store, rows)
    nxt = a.server_update(r)
    want = [2.5, 5.0, 8.0, 9.0, 1.0, -2.5, 4.0, 0.0, 1.0, 1.0, 1.0]
    torch.testing.assert_close(nxt, torch.tensor(want), rtol=0, atol=0)
    held, present = store.get(BRANCHES, ids)
    assert present.all() and held.tolist() == [[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
    # client 9 rejected: the defense's aggregate is client 4's row (weights 1, 0); branch 0 is
    # then client 4's alone, w = 1 + 4, b = 2
    w2 = np.array([1.0, 0.0])
    r2 = ServerRound(
        0, g, rows[0], ids, np.array([True, False]), w2, {}, {}, 10, SLICES, None, rows
    )
    want2 = [1.0, 2.0, 5.0, 9.0, 1.0, 2.0, 4.0, 0.0, 1.0, 1.0, 1.0]
    torch.testing.assert_close(a.server_update(r2), torch.tensor(want2), rtol=0, atol=0)
    with pytest.raises(ValueError, match="needs the round's rows"):
        a.server_update(ServerRound(0, g, delta, ids, np.ones(2, bool), w, {}, {}, 10, SLICES))


def test_sent_branches_reads_nonzero_blocks() -> None:
    """Branches of 2 weights and a bias: a branch is sent when any of its 3 entries moved."""
    slices = {
        "body.1.weight": slice(0, 2),
        "head.weight": slice(2, 8),
        "head.bias": slice(8, 11),
        "head.active": slice(11, 14),
    }
    rows = torch.zeros(3, 14)
    rows[0, 3] = 1e-30  # branch 0's second weight
    rows[1, 10] = -2.0  # branch 2's bias
    rows[2, 0] = 5.0  # the body only: no branch
    assert sent_branches(rows, slices).tolist() == [
        [True, False, False],
        [False, False, True],
        [False, False, False],
    ]


def test_prediction_rule_by_hand() -> None:
    """Branches w = ((1, 0), (0, 1), (1, 1)), b = (0, 0, -1.5) on h = (2, 1): scores
    (2, 1, 1.5), argmax 0. With the active mask (0, 1, 1) in eval mode: (-1e9, 1, 1.5), argmax
    2; in training mode the mask does nothing."""
    head = BranchHead.from_linear(torch.nn.Linear(2, 3))
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
        head.bias.copy_(torch.tensor([0.0, 0.0, -1.5]))
    h = torch.tensor([[2.0, 1.0]])
    head.eval()
    assert head(h).tolist() == [[2.0, 1.0, 1.5]] and int(head(h).argmax()) == 0
    head.active.copy_(torch.tensor([0.0, 1.0, 1.0]))
    assert head(h).tolist() == [[-1e9, 1.0, 1.5]] and int(head(h).argmax()) == 2
    head.train()
    assert head(h).tolist() == [[2.0, 1.0, 1.5]]
    # one hidden unit per branch: relu(v . h + c) * u + b; v = (1, -1), c = 0, u = 2, b = 1
    # on h = (2, 1): relu(1) * 2 + 1 = 3
    deep = BranchHead(2, 1, hidden=1)
    with torch.no_grad():
        deep.hidden_weight.copy_(torch.tensor([[[1.0, -1.0]]]))
        deep.hidden_bias.zero_()
        deep.weight.fill_(2.0)
        deep.bias.fill_(1.0)
    assert deep(h).tolist() == [[3.0]]


def test_branch_loss_by_hand() -> None:
    """Rows (y = 0, y = 1, padding with y = 2), scores (0, ln 3, 5) and (ln 3, 0, -5). Trained
    branches: 0 and 1 (class 2 only in the padding). Branch 0: BCE(0, 1) = ln 2, BCE(ln 3, 0)
    = ln 4, mean 1.5 ln 2; branch 1 the same by symmetry: loss 3 ln 2. Branch 2 has no
    gradient."""
    ln3 = math.log(3.0)
    s = torch.tensor([[0.0, ln3, 5.0], [ln3, 0.0, -5.0], [9.0, 9.0, 9.0]], requires_grad=True)
    loss, trained = branch_loss(s, torch.tensor([0, 1, 2]), torch.tensor([1.0, 1.0, 0.0]))
    torch.testing.assert_close(loss, torch.tensor(3 * math.log(2.0)), rtol=0, atol=1e-6)
    assert trained.tolist() == [1.0, 1.0, 0.0]
    (grad,) = torch.autograd.grad(loss, s)
    assert grad[:, 2].tolist() == [0.0, 0.0, 0.0] and grad[2].tolist() == [0.0, 0.0, 0.0]
    # d/ds BCE = (sigmoid(s) - t) / 2 rows: (1/2 - 1) / 2 = -1/4 at (0, 0); (3/4) / 2 at (1, 0)
    torch.testing.assert_close(grad[:2, 0], torch.tensor([-0.25, 0.375]), rtol=0, atol=1e-6)


def digits_model(a: Any, hidden: int = 8, norm: str = "none") -> tuple[Any, FlatLayout]:
    model = ModelSpec("mlp", (1, 8, 8), 10, hidden=hidden, norm=norm, extension=a).build(seed=0)
    return model, FlatLayout(model)


def test_wire_bytes_two_clients_by_hand() -> None:
    """The digits MLP with 8 hidden units: body 64*8 + 8 + 8*8 + 8 = 592 entries, 10 branches
    of 8 + 1 = 9, the active mask 10: 692 shared entries. Client 3 holds classes 0 and 3:
    upload 4 * (592 + 2 * 9) = 2440 bytes; client 7 class 5 alone: 4 * (592 + 9) = 2404.
    Both download the model, 4 * 692 = 2768."""
    _, layout = digits_model(fedvb())
    assert layout.size == 692
    counts = np.zeros((2, 10), np.int64)
    counts[0, [0, 3]] = [5, 2]
    counts[1, 5] = 4
    w = WireInfo(np.array([3, 7]), 692, 10, lambda: counts, layout.slices)
    up, down = fedvb().wire_bytes(w)
    assert up.tolist() == [2440.0, 2404.0] and down.tolist() == [2768.0, 2768.0]


@pytest.mark.parametrize("model", [("mlp", "none"), ("mlp", "batch"), ("cnn", "none")])
def test_active_mask_is_the_last_entries(model: tuple[str, str]) -> None:
    """personal_model writes the mask into the flat model's last C entries: the head's
    ``active`` buffer, whatever the body's buffers (BatchNorm's come before it)."""
    name, norm = model
    a = fedvb()
    m = ModelSpec(name, (1, 8, 8), 10, hidden=8, norm=norm, extension=a).build(seed=0)
    layout = FlatLayout(m)
    assert layout.slices[ACTIVE] == slice(layout.size - 10, layout.size)
    g = layout.flatten(m)
    row = torch.zeros(10)
    assert a.personal_model(g, row) is g  # holds no branch yet: the global model
    row[[2, 6]] = 1.0
    out = a.personal_model(g, row)
    assert torch.equal(out[:-10], g[:-10]) and torch.equal(out[-10:], row)


def test_extend_model_keeps_the_plain_head_and_validates() -> None:
    plain = ModelSpec("mlp", (1, 8, 8), 10, hidden=8).build(seed=0)
    model, _ = digits_model(fedvb())
    assert torch.equal(model.head.weight, plain.head.weight)
    assert torch.equal(model.head.bias, plain.head.bias)
    deep, layout = digits_model(fedvb(branch_hidden=3))
    assert tuple(deep.head.hidden_weight.shape) == (10, 3, 8)
    assert layout.size == 592 + 10 * (3 * 8 + 3 + 3 + 1) + 10
    with pytest.raises(ConfigError, match="branch_hidden=-1 invalid; must be int >= 0"):
        fedvb(branch_hidden=-1)
    with pytest.raises(ConfigError, match="valid: \\['branch_hidden', 'loss'\\]"):
        fedvb(width=2)


def local_data() -> tuple[torch.Tensor, torch.Tensor, list[np.ndarray]]:
    """5 clients: classes {0, 1} (13 rows: a padded last batch), {2} (4), {3, 4, 5} (9),
    {0, 1} again (6) and an empty one."""
    gen = torch.Generator().manual_seed(0)
    y = torch.tensor([0, 1] * 6 + [0] + [2] * 4 + [3, 4, 5] * 3 + [1, 0] * 3)
    x = torch.rand(len(y), 1, 8, 8, generator=gen)
    idx = [np.arange(0, 13), np.arange(13, 17), np.arange(17, 26), np.arange(26, 32)]
    return x, y, [*idx, np.zeros(0, np.int64)]


@pytest.mark.parametrize("hidden, wd, momentum", [(0, 1e-2, 0.9), (3, 0.0, 0.0), (3, 5e-3, 0.5)])
def test_untrained_branches_stay_exactly_zero_and_paths_agree(
    hidden: int, wd: float, momentum: float
) -> None:
    """With weight decay and momentum the rows of the branches a client lacks are exactly 0
    (the loss cancels the decay), those it holds are not; the vectorized and the sequential
    trainer agree to 1e-5."""
    a = fedvb(wd=wd, branch_hidden=hidden)
    model, layout = digits_model(a)
    g = layout.flatten(model)
    x, y, idx = local_data()
    spec = LocalSpec(lr=0.1, batch_size=4, weight_decay=wd, step=a, momentum=momentum)
    vec, seq = (
        train_clients(model, layout, g, x, y, idx, [2, 1, 2, 1, 1], [1, 2, 3, 4, 5], spec, v)
        for v in (True, False)
    )
    torch.testing.assert_close(vec.updates, seq.updates, rtol=0, atol=1e-5)
    np.testing.assert_allclose(vec.losses, seq.losses, rtol=0, atol=1e-5)
    held = torch.zeros(5, 10, dtype=torch.bool)
    for k, rows in enumerate(idx):
        held[k, y[rows].unique()] = True
    for out in (vec, seq):
        assert torch.equal(sent_branches(out.updates, layout.slices), held)
        assert torch.equal(out.outputs["classes"], held.float())  # the extra: its classes
        assert torch.equal(out.updates[4], torch.zeros(layout.size))  # the empty client
        assert bool((out.updates[0, :592] != 0).any())  # the body moves


def test_softmax_ablation_is_fedavg_on_the_same_model() -> None:
    """loss=softmax trains exactly as the plain step (FedAvg) on the same model, every branch
    moves and is sent, and the client still reports its classes."""
    a = fedvb(loss="softmax")
    model, layout = digits_model(a)
    g = layout.flatten(model)
    x, y, idx = local_data()
    seeds, epochs = [1, 2, 3, 4, 5], [2, 1, 2, 1, 1]
    spec = LocalSpec(lr=0.1, batch_size=4, weight_decay=0.0, step=a, momentum=0.9)
    out = train_clients(model, layout, g, x, y, idx, epochs, seeds, spec)
    plain = dataclasses.replace(spec, step=None)
    ref = train_clients(model, layout, g, x, y, idx, epochs, seeds, plain)
    torch.testing.assert_close(out.updates, ref.updates, rtol=0, atol=1e-7)
    assert sent_branches(out.updates[:4], layout.slices).all()
    assert out.outputs["classes"][1].tolist() == [0.0, 0.0, 1.0] + [0.0] * 7
    w = WireInfo(np.array([3, 7]), 692, 10, lambda: np.eye(2, 10, dtype=np.int64), layout.slices)
    up, down = a.wire_bytes(w)
    assert up.tolist() == [4.0 * 682] * 2 and down.tolist() == [4.0 * 692] * 2
    with pytest.raises(ConfigError, match="loss='hinge' invalid; must be str one of"):
        fedvb(loss="hinge")


def flat(**kw: Any) -> dict[str, Any]:
    return {
        "algorithm": "fedvb",
        "partition": "shards",
        "classes_per_client": 2,
        "num_clients": 10,
        "clients_per_round": 10,
        "client_test_fraction": 0.25,
        "hidden": 8,
        "batch_size": 10,
        **kw,
    }


def test_engine_rows_reach_the_server_and_clients_hold_their_classes(tmp_path: Path) -> None:
    """The case's partition (2 shards a client): the rows reach the server update (no
    pre-aggregation), the store holds each client's label set, at most 2 of 10 branches,
    exactly what wire_bytes counts; the per-client evaluation runs on those branches."""
    sim = Simulation(small_config(tmp_path / "run", **flat(rounds=2)))
    try:
        assert not sim.linear_round()
        rec = sim.run_round(0, 0.0)
        ids = np.array(sorted(rec.participants))
        labels = [y for _, y in sim.fed.arrays(sim.fed.clients, ids)]
        counts = np.stack([np.bincount(y, minlength=10) for y in labels])
        held, present = sim.store.get(BRANCHES, ids)
        assert present.all() and np.array_equal(held > 0, counts > 0)
        assert (held.sum(1) <= 2).all()
        w = WireInfo(ids, sim.space.size, 10, lambda: counts, sim.fed.layout.slices)
        up, down = sim.algorithm.wire_bytes(w)
        body, per = sim.space.size - 10 * 9 - 10, 9
        assert up.tolist() == (4.0 * (body + per * (counts > 0).sum(1))).tolist()
        assert (up <= 4.0 * (body + 2 * per)).all() and (down == 4.0 * sim.space.size).all()
        acc = sim.client_eval.evaluate(sim.global_flat)["client_accuracy_mean"]
        assert 0.0 <= acc <= 1.0
        sim.run_round(1, 0.0)
        assert torch.isfinite(sim.global_flat).all()
    finally:
        sim.close()


def test_virtual_population_of_100k(tmp_path: Path) -> None:
    cfg = small_config(
        tmp_path / "run",
        algorithm="fedvb",
        partition="virtual",
        num_clients=100_000,
        clients_per_round=50,
        rounds=3,
    )
    sim = Simulation(cfg)
    try:
        for r in range(3):
            rec = sim.run_round(r, 0.0)
            assert len(rec.participants) > 0
        assert torch.isfinite(sim.global_flat).all()
        assert sim.store.count(BRANCHES) > 0
    finally:
        sim.close()
