"""FedMA end to end and on its hooks: where a layer-wise stage starts (hand numbers), the
one-shot merge of two permuted copies of one model, the stages of a run (frozen layers send
exact zeros, the permutation written per client), vectorized = sequential in both modes, and a
population of 10^5 virtual devices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import small_config

from simulator.algorithms import ServerRound, make_algorithm
from simulator.algorithms.fedma import CURRENT, MASK, OWN, PERM, STAGE, TAG
from simulator.algorithms.fedma_layers import Net
from simulator.config.learning import AlgorithmConfig
from simulator.round.engine import Simulation
from simulator.training.client_step import splitter
from simulator.training.flat import FlatLayout
from simulator.training.models import ModelSpec
from simulator.training.spec import LocalSpec
from simulator.training.stacked import train_clients
from simulator.training.step import Start


def tiny(mode: str, **params: Any) -> tuple[Any, Any, FlatLayout, torch.Tensor]:
    """fedma on mlp1 4-3-2 (growth 1: 15 + 8 = 23 parameters, the head at 15..22)."""
    alg = make_algorithm(AlgorithmConfig("fedma", {"mode": mode, "growth": 1.0, **params}))
    model = ModelSpec("mlp1", (1, 2, 2), 2, hidden=3, extension=alg).build(seed=0)
    layout = FlatLayout(model)
    return alg, model, layout, layout.flatten(model)


def test_a_stage_starts_from_the_global_lower_layers_and_the_own_permuted_upper_ones() -> None:
    """Stage 1 of mlp1 (the head trains, layer 1 frozen): a client whose permutation is
    current (tag 5 = the sent round 5) starts from the global layer 1 and its own head
    (entries 15..22 = 15..22) with columns gathered by (2, 0, 1): (17, 15, 16, 20, 18, 19) and
    its own bias (21, 22); with a stale tag (4) it starts from the global model."""
    alg, _, layout, g = tiny("layerwise")
    own = torch.arange(23.0)
    mask = torch.zeros(23)
    mask[15:] = 1.0
    perm = torch.tensor([2.0, 0.0, 1.0])

    def start(tag: float) -> torch.Tensor:
        s = Start(
            g, g, {OWN: own, PERM: perm, TAG: torch.tensor([tag])},
            {MASK: mask, CURRENT: torch.tensor([5.0])},
            torch.zeros(1, 1, 1, 2, 2), torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, 1),
            lambda p, x: None, splitter(layout),
        )  # fmt: skip
        return alg.client_start(s)[0]

    fresh = start(5.0)
    assert torch.equal(fresh[:15], g[:15])
    assert fresh[15:].tolist() == [17.0, 15.0, 16.0, 20.0, 18.0, 19.0, 21.0, 22.0]
    assert torch.equal(start(4.0), g)


def round_of(alg: Any, g: torch.Tensor, models: list[torch.Tensor], counts: Any) -> ServerRound:
    k = len(models)
    return ServerRound(
        0, g, torch.zeros_like(g), np.arange(k), np.ones(k, bool), np.full(k, 1.0 / k),
        {"fedma_counts": torch.tensor(counts, dtype=torch.float32)},
        alg.init_server(g, g.numel()), 1000, FlatLayout(
            ModelSpec("mlp1", (1, 2, 2), 2, hidden=3, extension=alg).build(seed=0)
        ).slices, None, torch.stack(models) - g,
    )  # fmt: skip


def test_oneshot_merge_of_two_permuted_copies_is_the_model() -> None:
    """Client 1 holds client 0's model with its hidden neurons permuted (2, 0, 1) (rows of
    layer 1, columns of the head): the one-shot merge gives client 0's model (equal class
    counts); FedAvg's average of the two ('naive') does not."""
    alg, _, layout, g = tiny("oneshot", cost="l2")
    m0 = torch.randn(23, generator=torch.Generator().manual_seed(3))
    parts = layout.unflatten(m0)
    p = [2, 0, 1]
    m1 = torch.cat(
        [parts["body.1.weight"][p].reshape(-1), parts["body.1.bias"][p],
         parts["head.weight"][:, p].reshape(-1), parts["head.bias"]]
    )  # fmt: skip
    merged = alg.server_update(round_of(alg, g, [m0, m1], [[4, 4], [4, 4]]))
    torch.testing.assert_close(merged, m0, rtol=0, atol=1e-6)
    naive, _, _, _ = tiny("naive")
    r = round_of(naive, g, [m0, m1], [[4, 4], [4, 4]])
    r.delta = (r.rows * 0.5).sum(0)
    assert (naive.server_update(r) - m0).abs().max() > 0.1


def test_layerwise_stages_freeze_and_permute(tmp_path: Path) -> None:
    """mlp (2 hidden layers, 3 Linear layers): the stages run 0, 1, 2, 0; at stage 1 the rows
    are exact zeros on layer 1 and the global layer 1 does not move; at stage 2 on layers 1 and
    2; every client's permutation row holds a permutation of each hidden layer's slots; the
    round's bytes on the wire are the stage's (``wire_bytes`` sees the round's server state)."""
    cfg = small_config(
        tmp_path, algorithm="fedma", num_clients=4, clients_per_round=4, rounds=4, hidden=8
    )
    sim = Simulation(cfg)
    try:
        net = Net.of(sim.fed.layout.slices)
        for rnd, frozen in enumerate([0, 1, 2, 0]):
            before = sim.global_flat.clone()
            assert int(sim.server_state[STAGE][0]) == frozen
            rec = sim.run_round(rnd, 0.0)
            cut = net.span(frozen).start
            assert torch.count_nonzero(rec.rows.updates[:, :cut]) == 0
            assert torch.count_nonzero(rec.rows.updates[:, cut:]) > 0
            assert torch.equal(sim.global_flat[:cut], before[:cut])
            # bytes on the wire (float32): the stage's layers and 10 class counts up, the model
            # and, from stage 1 on, the last matched layer's permutation down; 4 clients
            up = 4 * (net.span(frozen).stop - cut + 10)
            down = 4 * (sim.space.shared_size + (net.hidden[frozen - 1] if frozen else 0))
            assert (rec.extra["upload_bytes"], rec.extra["download_bytes"]) == (4 * up, 4 * down)
            perm, present = sim.store.get(PERM, np.arange(4))
            assert present.all()
            for block in np.split(perm, np.cumsum(net.hidden)[:-1], axis=1):
                assert (np.sort(block, 1) == np.arange(block.shape[1])).all()
        assert int(sim.server_state[STAGE][0]) == 1
    finally:
        sim.close()


@pytest.mark.parametrize("mode", ["oneshot", "layerwise"])
def test_vectorized_equals_sequential(mode: str) -> None:
    """4 clients (one without work) on both paths; layerwise at stage 1 with current
    permutations (different per client) and a stale one."""
    alg, model, layout, g = tiny(mode)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.rand(45, 1, 2, 2, generator=gen), torch.randint(0, 2, (45,), generator=gen)
    idx = [np.arange(0, 5), np.arange(5, 17), np.arange(17, 37), np.arange(37, 45)]
    state, shared = {}, {}
    if mode == "layerwise":
        mask = torch.zeros(23)
        mask[15:] = 1.0
        perms = torch.tensor([[2.0, 0, 1], [0, 1, 2], [1, 2, 0], [2, 1, 0]])
        state = {
            OWN: g + 0.1 * torch.randn(4, 23, generator=gen),
            PERM: perms,
            TAG: torch.tensor([[3.0], [3.0], [2.0], [3.0]]),
        }
        shared = {MASK: mask, CURRENT: torch.tensor([3.0])}
    spec = LocalSpec(lr=0.1, batch_size=4, weight_decay=0.001, step=alg, momentum=0.9)
    outs = [
        train_clients(
            model, layout, g, x, y, idx, [2, 1, 2, 0], [5, 6, 7, 8], spec, v,
            state=state, shared=shared,
        )
        for v in (True, False)
    ]  # fmt: skip
    torch.testing.assert_close(outs[0].updates, outs[1].updates, rtol=0, atol=1e-5)
    for k in outs[0].outputs:
        torch.testing.assert_close(outs[0].outputs[k], outs[1].outputs[k], rtol=0, atol=1e-5)
    if mode == "layerwise":
        assert torch.count_nonzero(outs[0].updates[:, :15]) == 0
    else:  # own initialisations: different per client, the same on both paths
        own = outs[0].outputs[OWN]
        assert not torch.equal(own[0], own[1])
        assert torch.equal(outs[0].updates[3], own[3] - g)  # no work: its own init, untrained


@pytest.mark.parametrize("mode", ["oneshot", "layerwise"])
def test_runs_at_1e5_virtual_devices(tmp_path: Path, mode: str) -> None:
    cfg = small_config(
        tmp_path,
        algorithm="fedma",
        algorithm_params={"mode": mode},
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
        assert sim.store.count(OWN) > 0
    finally:
        sim.close()


def mode_config(out: Path, mode: str, **kw: Any) -> Any:
    """fedma in ``mode`` on 8 of 10 digits clients, an 8-wide MLP."""
    return small_config(
        out,
        algorithm="fedma",
        algorithm_params={"mode": mode},
        num_clients=10,
        clients_per_round=8,
        hidden=8,
        **kw,
    )


@pytest.mark.parametrize("mode", ["oneshot", "naive"])
def test_resume_is_bitwise_in_the_one_shot_modes(tmp_path: Path, mode: str) -> None:
    """(The algorithm matrix runs the default, layerwise.) A run killed after round 2 and
    resumed gives the events and the global model of an uninterrupted one."""
    from simulator.run.experiment import resume_config, run_experiment
    from simulator.run.output import read_events

    kw = {"rounds": 3, "checkpoint_every": 1, "client_test_fraction": 0.2}
    crashed = mode_config(tmp_path / "crashed", mode, **kw)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(crashed, crash_after=2)
    run_experiment(resume_config(crashed.output.out))
    full = mode_config(tmp_path / "full", mode, **kw)
    run_experiment(full)
    wall = ("wall_time", "slowest_train_seconds", "chunks", "placement")
    a, b = (
        [
            {k: v for k, v in e.items() if k not in wall}
            for e in read_events(Path(c) / "events.jsonl")
        ]
        for c in (crashed.output.out, full.output.out)
    )
    assert [e["round"] for e in a] == [0, 1, 2] and a == b
    ga, gb = (
        torch.load(Path(c) / "checkpoint.pt", weights_only=False)["global"]
        for c in (crashed.output.out, full.output.out)
    )
    assert torch.equal(ga, gb)


def test_ledger_audits_clean_in_oneshot_mode(tmp_path: Path) -> None:
    """The recorded rows are the clients' own models minus the global one (what they send);
    the audit replays the one-shot merge from them clean."""
    from ledger.audit import audit_run
    from simulator.run.experiment import run_experiment

    cfg = mode_config(tmp_path / "run", "oneshot", rounds=2, ledger=True, committee=1)
    run_experiment(cfg)
    rep = audit_run(Path(cfg.output.out), bls=False)
    assert rep.clean, rep.text()
    assert rep.rounds == 2


@pytest.mark.parametrize("direction", ["down", "both"])
def test_one_shot_modes_refuse_a_download_mask(tmp_path: Path, direction: str) -> None:
    """The one-shot modes send clients no model: a download mask would change the global
    model by a transfer that never happens (342 of 870 entries, unrefused), so it is refused
    in one line; masked uploads run, and layerwise (which downloads) takes both."""
    for mode in ("oneshot", "naive"):
        cfg = mode_config(
            tmp_path / f"{mode}-{direction}",
            mode,
            rounds=1,
            compression="mask",
            compression_params={"direction": direction, "rate": 0.5},
        )
        hint = r"sends clients no global model \(compress only the uploads: direction=up\)$"
        with pytest.raises(ValueError, match=hint):
            Simulation(cfg)
    for mode, d in (("oneshot", "up"), ("layerwise", direction)):
        kw = {"direction": d, "rate": 0.5}
        cfg = mode_config(tmp_path / f"ok-{mode}", mode, rounds=1, compression="mask",
                          compression_params=kw)  # fmt: skip
        sim = Simulation(cfg)
        try:
            rec = sim.run_round(0, 0.0)
        finally:
            sim.close()
        assert (rec.extra["download_bytes"] > 0) == (mode == "layerwise")
