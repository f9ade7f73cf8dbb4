"""FedUFO: the CGR target of a 2-client group, the KL, the discriminator's two losses and their
separated gradients, dynamic sampling and the server update worked by hand; the discriminator
added to the model; vectorized == sequential with peers in stage two; two rounds through the
engine, its scores through a checkpoint, and a resume that matches the uninterrupted run."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from simulator.algorithms import ALGORITHMS, ServerRound, make_algorithm
from simulator.algorithms.fedufo import PERF, FedUFO
from simulator.algorithms.fedufo_losses import (
    cgr_target,
    class_shares,
    discriminator_loss,
    in_play,
    kl_to,
    pick_lowest,
    uniform_loss,
)
from simulator.config.fields import ConfigError
from simulator.config.learning import AlgorithmConfig
from simulator.config.sections import build_config
from simulator.state.store import ClientStore
from simulator.training.flat import FlatLayout
from simulator.training.models import ModelSpec
from simulator.training.spec import LocalSpec
from simulator.training.stacked import train_clients


def ufo(**params: Any) -> FedUFO:
    a = make_algorithm(AlgorithmConfig(algorithm="fedufo", algorithm_params=params))
    assert isinstance(a, FedUFO)
    return a


def test_registry_and_parameters() -> None:
    assert ALGORITHMS["fedufo"] is FedUFO
    assert ufo().p == {
        "uad": 1.0,
        "cgr": 1.0,
        "lam": 3.0,
        "stage_two": 60,
        "peers": 10,
        "disc_classes": 100,
        "cgr_target": "softmax",
        "dynamic_sampling": False,
    }
    with pytest.raises(
        ConfigError, match=r"algorithm 'fedufo': unknown parameter 'mu'; valid: \['cgr', "
    ):
        ufo(mu=1)
    with pytest.raises(
        ConfigError,
        match=r"fedufo cgr_target='max' invalid; must be str one "
        r"of \['softmax', 'mean'\]",
    ):
        ufo(cgr_target="max")
    with pytest.raises(ConfigError, match=r"fedufo peers=0 invalid; must be int >= 1"):
        ufo(peers=0)


# ------------------------------------------------------------------------- by hand, client side


def test_cgr_target_of_a_two_client_group_by_hand() -> None:
    """Peers A and B, 3 classes. Class counts A = (2, 1, 0), B = (2, 0, 1): p_A = (2/4, 1/1, 0)
    = (0.5, 1, 0), p_B = (0.5, 0, 1) (Eq. 7's class shares within the group).

    One row predicted y_A = (0.5, 0.3, 0.2), y_B = (0.2, 0.2, 0.6):
    z = p_A * y_A + p_B * y_B = (0.25 + 0.10, 0.3, 0.6) = (0.35, 0.3, 0.6).
    'mean' reading: z / 1.25 = (0.28, 0.24, 0.48).
    'softmax' reading (Eq. 7 as printed): e^z = (1.419068, 1.349859, 1.822119), sum 4.591046,
    -> (0.309095, 0.294020, 0.396885): flat, the largest ratio e^(0.6 - 0.3) = 1.35.
    """
    shares = class_shares(torch.tensor([[2.0, 1.0, 0.0], [2.0, 0.0, 1.0]]))
    torch.testing.assert_close(shares, torch.tensor([[0.5, 1.0, 0.0], [0.5, 0.0, 1.0]]))
    probs = torch.tensor([[[0.5, 0.3, 0.2]], [[0.2, 0.2, 0.6]]])  # [M=2, B=1, C=3]
    torch.testing.assert_close(
        cgr_target(probs, shares, "mean"), torch.tensor([[0.28, 0.24, 0.48]])
    )
    torch.testing.assert_close(
        cgr_target(probs, shares, "softmax"),
        torch.tensor([[0.309095, 0.294020, 0.396885]]),
        atol=1e-6,
        rtol=0,
    )
    # a class nobody in the group holds has share 0 for everyone (not 0/0)
    torch.testing.assert_close(
        class_shares(torch.tensor([[1.0, 0.0], [3.0, 0.0]])),
        torch.tensor([[0.25, 0.0], [0.75, 0.0]]),
    )


def test_kl_to_target_by_hand() -> None:
    """KL(t || softmax(logits)) with t = (0.5, 0.5, 0), softmax = (0.25, 0.25, 0.5):
    0.5 ln 2 + 0.5 ln 2 + 0 = ln 2 on a real row; the padded row counts for nothing."""
    logits = torch.log(torch.tensor([[0.25, 0.25, 0.5], [0.9, 0.05, 0.05]]))
    target = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    kl = kl_to(target, logits, torch.tensor([1.0, 0.0]))
    assert kl.item() == pytest.approx(math.log(2), abs=1e-6)


def _disc(b2: list[float]) -> dict[str, torch.Tensor]:
    """A discriminator on 2-d features with 3 outputs whose first layer is the identity."""
    return {
        "disc.0.weight": torch.eye(2, requires_grad=True),
        "disc.0.bias": torch.zeros(2, requires_grad=True),
        "disc.2.weight": torch.zeros(3, 2, requires_grad=True),
        "disc.2.bias": torch.tensor(b2, requires_grad=True),
    }


def test_discriminator_losses_by_hand_and_their_gradients_apart() -> None:
    """D's logits are its last bias b = (0, 5, ln 3) (zero last weight). One peer labelled 0:
    outputs in play {0, 2} (the peer's and the last, "this client"), so D's softmax over them is
    (1/4, -, 3/4) and output 1 (nobody's this round) takes no mass.

    UAD (uniform over the 2 outputs in play): -(ln 1/4 + ln 3/4) / 2 = (1.386294 + 0.287682) / 2
    = 0.836988. D's loss: own rows labelled 2: -ln 3/4 = 0.287682; the peer's labelled 0:
    -ln 1/4 = 1.386294; the two models weighted equally: 0.836988.
    UAD moves the features, never D; D's loss moves D, never the features."""
    d = _disc([0.0, 5.0, math.log(3.0)])
    feats = torch.tensor([[1.0, 2.0]], requires_grad=True)
    labels = torch.tensor([[1.0, 0.0, 0.0]])
    play = in_play(labels)
    torch.testing.assert_close(play, torch.tensor([1.0, 0.0, 1.0]))
    mask = torch.ones(1)
    u = uniform_loss(d, feats, play, mask)
    dl = discriminator_loss(d, feats, torch.tensor([[[3.0, 4.0]]]), labels, play, mask)
    assert u.item() == pytest.approx(0.836988, abs=1e-6)
    assert dl.item() == pytest.approx(0.836988, abs=1e-6)
    params = list(d.values())
    g_u = torch.autograd.grad(u, [feats, *params], allow_unused=True)
    assert g_u[0] is not None and all(g is None for g in g_u[1:])
    g_d = torch.autograd.grad(dl, [feats, *params], allow_unused=True)
    assert g_d[0] is None and g_d[4] is not None and float(g_d[4].abs().sum()) > 0


def test_dynamic_sampling_picks_the_lowest_half_by_hand() -> None:
    """perf = (0.9, ?, 0.2, 0.5, ?, 0.1, 0.8, 0.3) (? never measured), m = 4: the 2 lowest,
    clients 5 (0.1) and 2 (0.2), plus 2 uniform among the other 6; client 6 is not eligible."""
    perf = np.array([0.9, np.nan, 0.2, 0.5, np.nan, 0.1, 0.8, 0.3])
    cands = np.array([0, 1, 2, 3, 4, 5, 7])
    others = set()
    for seed in range(20):
        a = pick_lowest(cands, perf[cands], 4, np.random.default_rng(seed))
        np.testing.assert_array_equal(
            a, pick_lowest(cands, perf[cands], 4, np.random.default_rng(seed))
        )
        assert len(set(a.tolist())) == 4 and {2, 5} <= set(a.tolist()) and 6 not in a
        assert list(a) == sorted(a)
        others |= set(a.tolist()) - {2, 5}
    assert others == {0, 1, 3, 4, 7}  # the uniform half reaches every other candidate
    # nothing measured yet: the engine's uniform choice
    store = ClientStore(1 << 20)
    assert ufo(dynamic_sampling=True).choose(cands, 4, np.random.default_rng(0), {}) is None
    assert ufo(dynamic_sampling=True).choose(cands, 4, np.random.default_rng(0), {}, store) is None
    # the scores as store rows (clients 1 and 4 have none): the same pick as by hand
    measured = np.flatnonzero(~np.isnan(perf))
    store.declare(PERF, (), np.float32)
    store.put(PERF, measured, perf[measured].astype(np.float32))
    picked = ufo(dynamic_sampling=True).choose(cands, 4, np.random.default_rng(3), {}, store)
    np.testing.assert_array_equal(
        picked, pick_lowest(cands, perf[cands], 4, np.random.default_rng(3))
    )
    assert {2, 5} <= set(picked.tolist())
    assert ufo().choose(cands, 4, np.random.default_rng(0), {}, store) is None  # sampling off


# ------------------------------------------------------------------------- by hand, server side


def test_server_update_by_hand() -> None:
    """Clients 3, 7, 12 arrive, 7 rejected; P = 2, 3 classes, disc_classes = 10, stage_two = 2.
    Round 1: the kept posteriors (rows 0 and 2) become the peers, labelled 3 and 12 mod 10 = 2;
    class counts (2, 1, 0) and (2, 0, 1) -> shares (0.5, 1, 0) and (0.5, 0, 1); accuracies
    0.5 and 0.75 enter the table of N = 15 (7's 0.25 does not); round 2 is stage two; the model
    takes the FedAvg step g + delta."""
    a = ufo(disc_classes=10, stage_two=2, dynamic_sampling=True)
    server = a.init_server(torch.zeros(2), 2)
    assert server["peers"].shape == (0, 2) and float(server["stage"]) == 0.0
    extras = {
        "post": torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]),
        "counts": torch.tensor([[2.0, 1.0, 0.0], [0.0, 0.0, 5.0], [2.0, 0.0, 1.0]]),
        "acc": torch.tensor([0.5, 0.25, 0.75]),
    }
    store = ClientStore(1 << 20)
    new = a.server_update(
        ServerRound(
            1,
            torch.ones(2),
            torch.tensor([0.5, -1.0]),
            np.array([3, 7, 12]),
            np.array([True, False, True]),
            np.array([0.5, 0.0, 0.5]),
            extras,
            server,
            15,
            store=store,
        )
    )
    torch.testing.assert_close(new, torch.tensor([1.5, 0.0]))
    torch.testing.assert_close(server["peers"], torch.tensor([[1.0, 2.0], [5.0, 6.0]]))
    assert server["peer_labels"].shape == (2, 11)
    assert server["peer_labels"].argmax(1).tolist() == [3, 2]
    torch.testing.assert_close(
        server["peer_shares"], torch.tensor([[0.5, 1.0, 0.0], [0.5, 0.0, 1.0]])
    )
    # the accuracies are rows of the client-state store, not server state
    assert "perf" not in server
    perf, measured = store.get(PERF, np.arange(15))
    perf[~measured] = np.nan
    assert perf[3] == 0.5 and perf[12] == 0.75 and np.isnan(perf[7])
    assert np.isnan(np.delete(perf, [3, 12])).all()
    assert float(server["stage"]) == 1.0
    with pytest.raises(ValueError, match="client-state store; ServerRound.store is None"):
        a.server_update(
            ServerRound(
                1,
                torch.ones(2),
                torch.zeros(2),
                np.array([3]),
                np.array([True]),
                np.ones(1),
                {k: v[:1] for k, v in extras.items()},
                server,
                15,
            )
        )
    # more kept rows than peers: a round-seeded draw of 1; nothing kept: the peers stay
    one = ufo(peers=1)
    st = one.init_server(torch.zeros(2), 2)
    one.server_update(
        ServerRound(
            0,
            torch.ones(2),
            torch.zeros(2),
            np.array([3, 7, 12]),
            np.array([True, True, True]),
            np.ones(3) / 3,
            extras,
            st,
            15,
        )
    )
    assert st["peers"].shape == (1, 2) and float(st["stage"]) == 0.0
    kept = st["peers"].clone()
    one.server_update(
        ServerRound(
            1,
            torch.ones(2),
            torch.zeros(2),
            np.array([3]),
            np.array([False]),
            np.zeros(1),
            {k: v[:1] for k, v in extras.items()},
            st,
            15,
        )
    )
    torch.testing.assert_close(st["peers"], kept)


# ------------------------------------------------------------------------- the model and trainer


def test_extend_model_adds_the_discriminator() -> None:
    """digits MLP 64 -> 16 -> 16 -> 10 has 1040 + 272 + 170 = 1482 parameters; D adds
    Linear(16, 16) + Linear(16, 4 + 1) = 272 + 85 = 357 after them; the MLP's own initial
    weights are those of the plain model (D is built last under the same seed)."""
    a = ufo(disc_classes=4)
    model = ModelSpec("mlp", (1, 8, 8), 10, hidden=16, extension=a).build(seed=0)
    layout = FlatLayout(model)
    assert layout.num_params == 1482 + 357
    assert list(layout.slices)[-4:] == [
        "disc.0.weight",
        "disc.0.bias",
        "disc.2.weight",
        "disc.2.bias",
    ]
    plain = ModelSpec("mlp", (1, 8, 8), 10, hidden=16).build(seed=0)
    torch.testing.assert_close(layout.flatten(model)[:1482], FlatLayout(plain).flatten(plain))
    bn = ModelSpec("mlp", (1, 8, 8), 10, hidden=16, norm="batch", extension=a).build(seed=0)
    assert FlatLayout(bn).param_names[-4:] == list(layout.slices)[-4:]  # BatchNorm is fine


@pytest.mark.parametrize("reading", ["softmax", "mean"])
def test_vectorized_equals_sequential_with_peers_in_stage_two(reading: str) -> None:
    a = ufo(disc_classes=6, stage_two=0, cgr_target=reading, dynamic_sampling=True)
    model = ModelSpec("mlp", (1, 8, 8), 10, hidden=16, extension=a).build(seed=0)
    layout = FlatLayout(model)
    g = layout.flatten(model)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.rand(60, 1, 8, 8, generator=gen), torch.randint(0, 10, (60,), generator=gen)
    n = layout.num_params
    shared = a.init_server(g, n)
    assert float(shared["stage"]) == 1.0
    shared.update(
        peers=g[:n] + 0.05 * torch.randn(3, n, generator=gen),
        peer_labels=torch.nn.functional.one_hot(torch.tensor([0, 4, 2]), 7).float(),
        peer_shares=class_shares(torch.rand(3, 10, generator=gen)),
    )
    idx = [np.arange(0, 5), np.arange(5, 17), np.arange(17, 37), np.arange(37, 45)]
    spec = LocalSpec(lr=0.1, batch_size=10, weight_decay=0.001, step=a, momentum=0.9)
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
    assert set(out[0].outputs) == {"post", "counts", "acc"}
    for k in out[0].outputs:
        torch.testing.assert_close(out[0].outputs[k], out[1].outputs[k], rtol=0, atol=1e-5)
    torch.testing.assert_close(out[0].outputs["post"][:3], g[:n] + out[0].updates[:3, :n])
    np.testing.assert_array_equal(
        out[0].outputs["counts"][2].numpy(), np.bincount(y[17:37].numpy(), minlength=10)
    )
    # the terms change the update: plain FedAvg steps differ
    plain = train_clients(
        model,
        layout,
        g,
        x,
        y,
        idx,
        [1, 2, 1, 0],
        [1, 2, 3, 4],
        LocalSpec(lr=0.1, batch_size=10, weight_decay=0.001, momentum=0.9),
    )
    assert not torch.allclose(out[0].updates[:3, :1482], plain.updates[:3, :1482], atol=1e-4)


# ------------------------------------------------------------------------- through the engine


def _flat(out: Path, **over: Any) -> dict[str, Any]:
    return {
        "backend": "local",
        "dataset": "digits",
        "num_clients": 8,
        "clients_per_round": 4,
        "rounds": 3,
        "local_epochs": 1,
        "batch_size": 16,
        "hidden": 16,
        "partition": "shards",
        "client_test_fraction": 0.2,
        "algorithm": "fedufo",
        "algorithm_params": {
            "stage_two": 1,
            "dynamic_sampling": True,
            "disc_classes": 8,
            "peers": 3,
        },
        "defense": "median",
        "progress": False,
        "plots": False,
        "out": str(out),
        **over,
    }


def test_two_rounds_through_the_engine(tmp_path: Path) -> None:
    """Round 0 trains without peers; its kept posteriors (at most 3) are round 1's peers; the
    discriminator is part of the defended rows; round 1 picks the 2 clients with the lowest
    measured accuracy."""
    from simulator.round.engine import Simulation

    sim = Simulation(build_config(flat=_flat(tmp_path, rounds=2)))
    try:
        assert sim.space.local is None and sim.space.size == sim.fed.layout.size
        rec = sim.run_round(0, 0.0)
        st = sim.server_state
        kept = rec.participants
        assert 0 < st["peers"].shape[0] <= 3 and float(st["stage"]) == 1.0
        assert set(st["peer_labels"].argmax(1).tolist()) <= set(kept)
        perf, measured = sim.store.get(PERF, np.arange(8))
        perf[~measured] = np.nan
        assert set(np.flatnonzero(~np.isnan(perf)).tolist()) == set(kept)
        lowest = [c for c in np.argsort(perf, kind="stable") if not np.isnan(perf[c])][:2]
        rec1 = sim.run_round(1, 0.0)
        assert set(lowest) <= set(rec1.selected)
        assert np.isfinite(sim.global_flat.numpy()).all()
    finally:
        sim.close()


def test_scores_survive_a_checkpoint(tmp_path: Path) -> None:
    """Round 0 scores exactly the clients it kept; a checkpoint after it, loaded into a new
    simulation, holds the same scores bit for bit, and round 1 then picks the same clients as
    the run that never stopped (2 of its 4 among the 2 lowest scores)."""
    from simulator.round.engine import Simulation

    cfg = build_config(flat=_flat(tmp_path / "run", rounds=2))
    ids = np.arange(8)
    sim = Simulation(cfg)
    try:
        kept = sim.run_round(0, 0.0).participants
        perf, measured = sim.store.get(PERF, ids)
        assert ids[measured].tolist() == sorted(kept) and "perf" not in sim.server_state
        sim.save_checkpoint(tmp_path / "run", 0.0)
        selected = sim.run_round(1, 0.0).selected
    finally:
        sim.close()
    resumed = Simulation(cfg)
    try:
        resumed.load_state_dict(
            torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False),
            tmp_path / "run" / "state" / "checkpoint",
        )
        got, known = resumed.store.get(PERF, ids)
        np.testing.assert_array_equal(known, measured)
        assert got.tobytes() == perf.tobytes()
        lowest = [int(c) for c in ids[measured][np.argsort(perf[measured], kind="stable")][:2]]
        assert set(lowest) <= set(selected)
        assert resumed.run_round(1, 0.0).selected == selected
    finally:
        resumed.close()


def test_resume_matches_the_uninterrupted_run(tmp_path: Path) -> None:
    from simulator.run.experiment import resume_config, run_experiment
    from simulator.run.output import read_events

    crashed = build_config(flat=_flat(tmp_path / "crashed", checkpoint_every=1))
    with pytest.raises(KeyboardInterrupt):
        run_experiment(crashed, crash_after=2)
    run_experiment(resume_config(tmp_path / "crashed"))
    run_experiment(build_config(flat=_flat(tmp_path / "full")))
    wall = ("wall_time", "slowest_train_seconds", "chunks", "placement")
    got, want = (
        [{k: v for k, v in e.items() if k not in wall} for e in read_events(p / "events.jsonl")]
        for p in (tmp_path / "crashed", tmp_path / "full")
    )
    assert [e["round"] for e in got] == [0, 1, 2]
    assert got == want
