"""FedAF end to end: the two trainer paths, the one-line refusals, engine runs (a data attack,
virtual clients), the condensed sets on the ledger and a resumed run. The terms by hand are in
``test_fedaf.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import small_config

from simulator.algorithms import make_algorithm
from simulator.algorithms.fedaf import FedAF
from simulator.config.learning import AlgorithmConfig
from simulator.round.engine import Simulation
from simulator.run.experiment import resume_config, run_experiment
from simulator.training.flat import FlatLayout
from simulator.training.models import ModelSpec
from simulator.training.spec import LocalSpec
from simulator.training.stacked import train_clients


def fedaf(**params: Any) -> FedAF:
    a = make_algorithm(AlgorithmConfig(algorithm="fedaf", algorithm_params=params))
    assert isinstance(a, FedAF)
    return a


# ---------------------------------------------------------------------------- the trainer


def test_vectorized_equals_sequential_from_real_samples() -> None:
    """Four clients (one without work, one with a stored set), CDC on: the two paths agree to
    1e-5; the model entries never move (frozen); a fresh client's set starts from its own
    samples, so its row's held blocks are real-sample-like, its unheld blocks zero."""
    a = fedaf(ipc=2, lambda_loc=1.0)
    model = ModelSpec("mlp", (1, 8, 8), 10, hidden=6, extension=None).build(seed=0)
    layout = FlatLayout(model)
    g = layout.flatten(model)
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(45, 1, 8, 8, generator=gen)
    y = torch.randint(0, 4, (45,), generator=gen)
    idx = [np.arange(0, 5), np.arange(5, 17), np.arange(17, 37), np.arange(37, 45)]
    state = {"syn": torch.zeros(4, a.state_entries("syn", layout))}
    state["syn"][2] = torch.rand(1280, generator=gen)
    shared = a.init_server(g, layout.num_params)
    shared["v"], shared["v_have"] = torch.randn(10, 10, generator=gen), torch.ones(10)
    spec = LocalSpec(lr=0.1, batch_size=4, step=a, momentum=0.5)
    out = [
        train_clients(
            model,
            layout,
            g,
            x,
            y,
            idx,
            [2, 1, 1, 0],
            [1, 2, 3, 4],
            spec,
            v,
            state=state,
            shared=shared,
        )
        for v in (True, False)
    ]
    for k in out[0].outputs:
        torch.testing.assert_close(out[0].outputs[k], out[1].outputs[k], rtol=0, atol=1e-5)
    assert torch.count_nonzero(out[0].updates) == 0
    sent = out[0].outputs["condensed"].reshape(4, 10, 2, 64)
    held = out[0].outputs["counts"] > 0
    assert bool((sent.abs().sum((2, 3)) > 0).eq(held).all())
    assert bool(held[:, 4:].logical_not().all()) and int(held[1].sum()) >= 2
    torch.testing.assert_close(out[0].outputs["syn"][3], state["syn"][3])  # no work: kept


# ------------------------------------------------------------------------------ the engine


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"defense": "median"}, "defense 'median': algorithm 'fedaf' sends 'condensed', not"),
        (
            {"attack": "signflip", "attack_fraction": 0.25},
            "attack 'signflip': algorithm 'fedaf' sends 'condensed', not model updates; a model",
        ),
        (
            {"round_policy": "fedbuff", "policy_params": {"k": 2}},
            "round policy 'fedbuff': algorithm 'fedaf' sends 'condensed', not model updates",
        ),
    ],
)
def test_update_only_parts_refuse_fedaf(tmp_path: Path, kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match="^" + message):
        Simulation(small_config(tmp_path, algorithm="fedaf", **kw))


def test_engine_round_with_a_data_attack(tmp_path: Path) -> None:
    """Two rounds with label flipping (y -> 9 - y): the recorded rows are the condensed sets
    (C * ipc * 64 entries), the malicious clients condense their flipped data (their counts
    are their true counts reversed, the honest ones' their own), the server's v and flags cover
    the 10 classes, the model moved."""
    from simulator.round.wire import label_counts

    cfg = small_config(
        tmp_path,
        algorithm="fedaf",
        algorithm_params={"ipc": 2, "server_epochs": 1},
        attack="labelflip",
        attack_fraction=0.25,
        partition="dirichlet",
        dirichlet_alpha=0.5,
    )
    sim = Simulation(cfg)
    try:
        g0 = sim.global_flat.clone()
        fixed, flipped = set(sim.adversary.fixed.tolist()), 0
        for rnd in range(2):
            rec = sim.run_round(rnd, 0.0)
            assert rec.rows.updates.shape == (4, 10 * 2 * 64)
            ids = np.asarray(rec.rows.client_ids)
            true = label_counts(sim.context(), ids)
            for i, c in enumerate(ids.tolist()):
                want = true[i, ::-1] if c in fixed else true[i]
                np.testing.assert_array_equal(rec.extras[c]["counts"], want)
                flipped += c in fixed
        assert flipped > 0
        assert sim.server_state["v"].shape == (10, 10)
        assert not torch.equal(sim.global_flat, g0)
        assert np.isfinite(sim.server.test(sim.global_flat)[0])
    finally:
        sim.close()


def test_virtual_population_of_100000(tmp_path: Path) -> None:
    """10^5 virtual clients, 8 a round, 2 rounds: only the trained clients hold a set in the
    store (6400 float32 entries each)."""
    cfg = small_config(
        tmp_path,
        algorithm="fedaf",
        algorithm_params={"server_epochs": 1},
        num_clients=100_000,
        partition="virtual",
        clients_per_round=8,
        rounds=2,
    )
    sim = Simulation(cfg)
    try:
        ids = [c for rnd in range(2) for c in sim.run_round(rnd, 0.0).rows.client_ids.tolist()]
        assert sim.store.count("syn") == len(set(ids))
        assert sim.store.row_bytes("syn") == 4 * 6400
        assert bool(sim.store.has("syn", np.array(sorted(set(ids)))).all())
    finally:
        sim.close()


class Rows:
    """Round callback keeping each round's rows and extras (what the clients sent)."""

    needs_rows = True

    def __init__(self) -> None:
        self.rows: dict[int, Any] = {}
        self.extras: dict[int, dict[int, dict[str, np.ndarray]]] = {}

    def on_round_end(self, sim: Simulation, record: Any) -> None:
        self.rows[record.round] = record.rows
        self.extras[record.round] = record.extras


def run_config(out: Path, **kw: Any) -> Any:
    return small_config(
        out,
        algorithm="fedaf",
        algorithm_params={"ipc": 2, "server_epochs": 1},
        partition="dirichlet",
        dirichlet_alpha=0.5,
        attack="labelflip",
        attack_fraction=0.25,
        **kw,
    )


def test_the_ledger_records_the_condensed_sets(tmp_path: Path) -> None:
    """What is recorded is what is sent: each round's pack holds every client's condensed set
    (10 classes x 2 images x 64 pixels) and its extras (logits, counts) bit for bit, the set
    non-zero exactly on the classes the client's counts hold; the audit replays the run (rows
    and extras) clean."""
    from ledger.audit import audit_run
    from ledger.pack import Pack
    from ledger.pack_rows import rows_of_pack

    cfg = run_config(tmp_path / "run", rounds=2, ledger=True, committee=1)
    cap = Rows()
    run_experiment(cfg, callbacks=[cap])
    ledger = Path(cfg.output.out) / "ledger"
    rounds = [json.loads(line) for line in (ledger / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == [0, 1]
    for r in rounds:
        extras: dict[int, dict[str, np.ndarray]] = {}
        pack = Pack.read(ledger, bytes.fromhex(r["pack"][2:]))
        rows, ids = rows_of_pack(pack, 1280, extras)
        sent, sent_extras = cap.rows[r["round"]], cap.extras[r["round"]]
        assert ids == sent.client_ids.tolist() and len(ids) == 4
        np.testing.assert_array_equal(rows, sent.updates.numpy())
        for c in ids:  # the class-wise mean logits [C, C] and counts [C] beside each row
            assert sorted(extras[c]) == ["counts", "logits"]
            np.testing.assert_array_equal(extras[c]["logits"], sent_extras[c]["logits"])
            np.testing.assert_array_equal(extras[c]["counts"], sent_extras[c]["counts"])
        held = np.stack([sent_extras[c]["counts"] > 0 for c in ids])
        np.testing.assert_array_equal(np.abs(rows.reshape(4, 10, 128)).sum(-1) > 0, held)
    rep = audit_run(Path(cfg.output.out), bls=False)
    assert rep.clean, rep.text()
    assert rep.rounds == 2


def test_resume_is_bitwise(tmp_path: Path) -> None:
    """A run crashed after round 1 (of 3) and resumed from its checkpoint sends the same
    condensed sets in round 2 (the stored S_k came back with the store) and ends on the same
    model, bit for bit."""
    kw = {"rounds": 3, "checkpoint_every": 1}
    crashed, full = run_config(tmp_path / "crashed", **kw), run_config(tmp_path / "full", **kw)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(crashed, crash_after=2)
    resumed, whole = Rows(), Rows()
    run_experiment(resume_config(crashed.output.out), callbacks=[resumed])
    run_experiment(full, callbacks=[whole])
    assert sorted(resumed.rows) == [2]
    assert torch.equal(resumed.rows[2].updates, whole.rows[2].updates)
    assert bool((whole.rows[2].updates != 0).any())
    ga = torch.load(Path(crashed.output.out) / "checkpoint.pt", weights_only=False)["global"]
    gb = torch.load(Path(full.output.out) / "checkpoint.pt", weights_only=False)["global"]
    assert torch.equal(ga, gb)
