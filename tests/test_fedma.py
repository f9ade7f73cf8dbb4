"""FedMA's pieces with numbers checkable by hand: the matching (exact recovery of 3 permuted
neurons, a new neuron when its cost is the lowest, the width cap), the label-weighted
classifier on 2 clients x 2 classes, the next layer put in the global order (server and
client side, vmapped), the own initialisation, the widened model, the bytes on the wire and the
one-line refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import small_config

from simulator.algorithms import WireInfo, make_algorithm
from simulator.algorithms.fedma_layers import (
    Net,
    label_weighted,
    own_init,
    permute_inputs,
    to_global,
    widen,
)
from simulator.algorithms.fedma_match import Cost, inverse_permutation, label_weights, match_layer
from simulator.config.fields import ConfigError
from simulator.config.learning import AlgorithmConfig
from simulator.training.client_step import splitter
from simulator.training.flat import FlatLayout
from simulator.training.models import ModelSpec

#: client 0's three neurons, and client 1's: the same three, permuted (c, a, b) and moved
W0 = np.array([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 3.0]])
W1 = np.array([[0.0, 0.0, 3.2], [1.2, 0.0, 0.0], [0.0, 1.6, 0.0]])


@pytest.mark.parametrize("cost", [Cost("l2"), Cost("pfnm")])
def test_three_permuted_neurons_are_recovered_exactly(cost: Cost) -> None:
    """Client 1's neurons (c, a, b) go to global slots (2, 0, 1); each global neuron is the
    mean of its two: a = (1.1, 0, 0), b = (0, 1.8, 0), c = (0, 0, 3.1)."""
    assign, layer = match_layer([W0, W1], cost, cap=3, iters=2)
    assert assign[0].tolist() == [0, 1, 2] and assign[1].tolist() == [2, 0, 1]
    np.testing.assert_allclose(layer, [[1.1, 0, 0], [0, 1.8, 0], [0, 0, 3.1]], atol=1e-12)


def test_a_neuron_far_from_all_opens_a_new_one() -> None:
    """Client 1's third neuron (5, 5, 5) is 59 from the nearest free global neuron b (squared
    L2): with epsilon = 1 it opens global neuron 3 and b keeps client 0's value alone; with
    epsilon = 100 it matches b (mean (2.5, 3.5, 2.5)); with the width capped at 3 it must."""
    w1 = W1.copy()
    w1[2] = [5.0, 5.0, 5.0]
    assign, layer = match_layer([W0, w1], Cost("l2", epsilon=1.0), cap=6, iters=2)
    assert assign[1].tolist() == [2, 0, 3]
    np.testing.assert_allclose(layer, [[1.1, 0, 0], [0, 2, 0], [0, 0, 3.1], [5, 5, 5]], atol=1e-12)
    for cost, cap in ((Cost("l2", epsilon=100.0), 6), (Cost("l2", epsilon=1.0), 3)):
        assign, layer = match_layer([W0, w1], cost, cap=cap, iters=2)
        assert assign[1].tolist() == [2, 0, 1]
        np.testing.assert_allclose(layer[1], [2.5, 3.5, 2.5], atol=1e-12)
    # PFNM (sigma = sigma0 = gamma0 = 1): matching (5,5,5) to b scores |(5,7,5)|^2/3 - 4/2 =
    # 31, a new neuron 75/2 + 2 log(1/2) = 36.1: it opens one
    assign, _ = match_layer([W0, w1], Cost("pfnm"), cap=6, iters=2)
    assert assign[1].tolist() == [2, 0, 3]


def test_pfnm_scores_by_hand() -> None:
    """Client 1's (0, 0, 3.2) against c = (0, 0, 3) held by 1 of 2 clients: |(0,0,6.2)|^2/3 -
    9/2 + log(1/1) = 8.3133; as the first new neuron: 3.2^2/2 - 0 + 2 log(1/2) = 3.7337."""
    cost = Cost("pfnm").matrix(W1[:1], W0[2:], np.ones(1), j=2, new=2)
    np.testing.assert_allclose(
        -cost[0], [38.44 / 3 - 4.5, 5.12 + 2 * np.log(0.5), 5.12 - 2 * np.log(2) + 2 * np.log(0.5)]
    )


def test_label_weighted_classifier_two_clients_two_classes() -> None:
    """Counts (3, 1) and (1, 3): p = (0.75, 0.25) for class 0, (0.25, 0.75) for class 1.
    W[0] = .75 (1, 2) + .25 (5, 6) = (2, 3); W[1] = .25 (3, 4) + .75 (7, 8) = (6, 7);
    b = (.75 + .75, -.25 + 3.75) = (1.5, 3.5)."""
    net = Net.of({"head.weight": slice(0, 4), "head.bias": slice(4, 6)})
    new = np.zeros(6)
    weights = [np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[5.0, 6.0], [7.0, 8.0]])]
    counts = np.array([[3.0, 1.0], [1.0, 3.0]])
    label_weighted(net, new, weights, [np.array([1.0, -1.0]), np.array([3.0, 5.0])], counts)
    np.testing.assert_allclose(new, [2, 3, 6, 7, 1.5, 3.5])
    # a class nobody holds weighs both clients 1/2
    np.testing.assert_allclose(
        label_weights(np.array([[2.0, 0.0], [6.0, 0.0]])), [[0.25, 0.5], [0.75, 0.5]]
    )


def test_next_layer_permutation_server_and_client_side() -> None:
    """A client whose neurons 0 and 2 are active (1 inactive) matched to global slots 1 and 0:
    its next layer's columns (1, 0, 2) / (3, 0, 4) become (2, 1, 0) / (4, 3, 0); its store row
    is (2, 0, 1) (global slot 2 takes its inactive slot 1), and the client's gather by it gives
    the same columns, vmapped over two clients with different rows."""
    w = np.array([[1.0, 0.0, 2.0], [3.0, 0.0, 4.0]])
    act, assign = np.array([0, 2]), np.array([1, 0])
    np.testing.assert_array_equal(to_global(w, act, assign, 3), [[2, 1, 0], [4, 3, 0]])
    inv = inverse_permutation(act, assign, 3)
    assert inv.tolist() == [2, 0, 1]
    model = ModelSpec("mlp1", (1, 1, 2), 2, hidden=3).build(seed=0)
    layout = FlatLayout(model)
    split, net = splitter(layout), Net.of(layout.slices)
    flat = layout.flatten(model)
    flat[layout.slices["head.weight"]] = torch.tensor([1.0, 0.0, 2.0, 3.0, 0.0, 4.0])
    perms = torch.tensor([inv.tolist(), [0.0, 1.0, 2.0]])
    out = torch.vmap(lambda f, p: permute_inputs(f, p, split, net))(flat.expand(2, -1), perms)
    head = out[:, layout.slices["head.weight"]]
    assert head.tolist() == [[2.0, 1.0, 0.0, 4.0, 3.0, 0.0], [1.0, 0.0, 2.0, 3.0, 0.0, 4.0]]
    assert torch.equal(out[:, : layout.slices["head.weight"].start], flat.expand(2, -1)[:, :9])


def test_own_initialisation_covers_the_active_neurons() -> None:
    """Draws z = 10 (erf(10 / sqrt 2) = 1 in float32): every active weight and bias is
    1 / sqrt(fan_in): 1/2 in layer 1 (4 inputs), 1/sqrt(2) in the head (2 active inputs); the
    inactive neuron 2 stays 0 both ways; draws 0 give 0."""
    model = widen(ModelSpec("mlp1", (1, 2, 2), 2, hidden=2).build(seed=0), 1.5)
    layout = FlatLayout(model)
    split, net = splitter(layout), Net.of(layout.slices)
    g = layout.flatten(model)
    out = layout.unflatten(own_init(g, torch.full_like(g, 10.0), split, net))
    assert out["body.1.weight"].tolist() == [[0.5] * 4, [0.5] * 4, [0.0] * 4]
    assert out["body.1.bias"].tolist() == [0.5, 0.5, 0.0]
    r = 2**-0.5
    torch.testing.assert_close(out["head.weight"], torch.tensor([[r, r, 0.0], [r, r, 0.0]]))
    torch.testing.assert_close(out["head.bias"], torch.tensor([r, r]))
    assert torch.count_nonzero(own_init(g, torch.zeros_like(g), split, net)) == 0


def test_widen_adds_inactive_neurons_and_refuses_other_models() -> None:
    plain = ModelSpec("mlp1", (1, 2, 2), 3, hidden=2).build(seed=0)
    wide = widen(ModelSpec("mlp1", (1, 2, 2), 3, hidden=2).build(seed=0), 1.5)
    assert wide.body[1].weight.shape == (3, 4) and wide.head.weight.shape == (3, 3)
    assert torch.equal(wide.body[1].weight[:2], plain.body[1].weight)
    assert torch.equal(wide.head.weight[:, :2], plain.head.weight)
    assert not wide.body[1].weight[2].any() and not wide.head.weight[:, 2].any()
    for name, norm in (("cnn", "none"), ("mlp", "batch"), ("logreg", "none")):
        with pytest.raises(ConfigError, match="^algorithm fedma: "):
            widen(ModelSpec(name, (1, 8, 8), 10, hidden=4, norm=norm).build(seed=0), 1.0)


def test_bytes_on_the_wire() -> None:
    """mlp1 4-3-2 (growth 1): 23 parameters. layerwise stage 0 uploads them and 2 counts (100
    bytes) and downloads 92; stage 1 (the head: 8) uploads 40 and downloads 92 + 3 indices;
    oneshot uploads 100 and downloads nothing; naive uploads 92."""
    model = ModelSpec("mlp1", (1, 2, 2), 2, hidden=3).build(seed=0)
    slices = FlatLayout(model).slices
    want = {
        ("layerwise", 0): (100, 92),
        ("layerwise", 1): (40, 104),
        ("oneshot", 0): (100, 0),
        ("naive", 0): (92, 0),
    }
    for (mode, stage), (up, down) in want.items():
        alg = make_algorithm(AlgorithmConfig("fedma", {"mode": mode}))
        server = {"fedma_stage": torch.tensor([float(stage)])}
        w = WireInfo(np.array([3, 7]), 23, 2, lambda: np.zeros((2, 2)), slices, server=server)
        got = alg.wire_bytes(w)
        assert got[0].tolist() == [up, up] and got[1].tolist() == [down, down]
    with pytest.raises(ValueError, match="needs the server state"):
        make_algorithm(AlgorithmConfig("fedma")).wire_bytes(
            WireInfo(np.array([3]), 23, 2, lambda: np.zeros((1, 2)), slices)
        )


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (
            {"defense": "median"},
            "defense 'median': algorithm 'fedma' accepts only the defenses ['fedavg']",
        ),
        (
            {"round_policy": "fedbuff", "policy_params": {"k": 2}},
            "round policy 'fedbuff': algorithm 'fedma' accepts only the round policies",
        ),
        ({"model": "cnn"}, "algorithm fedma: matches the neurons of an MLP"),
        (
            {"server_lr": 0.5, "algorithm_params": {"mode": "oneshot"}},
            "algorithm.server_lr: fedma mode=oneshot has no server step",
        ),
        (
            {"algorithm_params": {"mode": "twoshot"}},
            r"algorithm.algorithm_params: fedma mode='twoshot' invalid; must be str one of",
        ),
    ],
)
def test_refusals_are_one_line(tmp_path: Path, kw: dict, message: str) -> None:
    from simulator.round.engine import Simulation

    cfg = {"algorithm": "fedma", "algorithm_params": {}, **kw}
    with pytest.raises((ValueError, ConfigError), match="^" + message.replace("[", r"\[")) as e:
        Simulation(small_config(tmp_path, **cfg)).close()
    assert "\n" not in str(e.value)


def test_accepted_policies_are_registered() -> None:
    """The round policies FedMA names (every row trained from the round's global model) exist:
    a misspelt name would refuse a valid policy."""
    from simulator.algorithms.fedma import SYNCHRONOUS
    from simulator.policies import POLICIES

    assert set(SYNCHRONOUS) <= set(POLICIES)
    assert "fedbuff" not in SYNCHRONOUS and "deadline_carryover" not in SYNCHRONOUS
