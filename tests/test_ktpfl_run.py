"""KT-pFL in the engine: three model groups, rows that are the clients' predictions on the
public set, the vectorized and sequential paths, resume, a virtual population of 10^5 devices,
the Ray pool, and the refusals of parts built for model updates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from simulator.algorithms.ktpfl import TARGET
from simulator.config.fields import ConfigError
from simulator.config.sections import Config, build_config
from simulator.round.engine import Simulation
from simulator.run.experiment import resume_config, run_experiment
from simulator.run.output import read_events
from simulator.training.groups import table_name

GROUPS = ["mlp:hidden=8", "mlp:hidden=16", "logreg"]


def kt_config(out: Path, **kw: Any) -> Config:
    flat = {
        "backend": "local",
        "dataset": "digits",
        "algorithm": "ktpfl",
        "model_groups": GROUPS,
        "num_clients": 6,
        "clients_per_round": 6,
        "partition": "shards",
        "classes_per_client": 2,
        "public_fraction": 0.05,
        "client_test_fraction": 0.25,
        "rounds": 3,
        "local_epochs": 1,
        "batch_size": 16,
        "lr": 0.05,
        "progress": False,
        "plots": False,
        "num_actors": 1,
        "out": str(out),
    }
    return build_config(flat={**flat, **kw})


def own_predictions(sim: Simulation, cid: int, temperature: float = 3.0) -> np.ndarray:
    """Client ``cid``'s soft predictions on the public set with its stored model, by hand."""
    g = cid % 3
    grp = sim.fed.groups[g]
    flat, present = sim.store.get(table_name("local", g), np.array([cid]))
    assert present[0]
    grp.layout.load(grp.model, torch.from_numpy(flat[0]))
    grp.model.eval()
    with torch.no_grad():
        return torch.softmax(grp.model(sim.fed.public_x) / temperature, -1).reshape(-1).numpy()


def own_accuracy(sim: Simulation) -> float:
    """Mean accuracy of the evaluated clients, each with its own stored model, by hand."""
    ev, acc, off = sim.client_eval, [], 0
    for cid, n in zip(ev.clients.tolist(), ev.counts.tolist(), strict=True):
        grp = sim.fed.groups[cid % 3]
        flat = sim.store.get(table_name("local", cid % 3), np.array([cid]))[0][0]
        grp.layout.load(grp.model, torch.from_numpy(flat))
        grp.model.eval()
        with torch.no_grad():
            pred = grp.model(ev.x[off : off + n]).argmax(1)
        acc.append(float((pred == ev.y[off : off + n]).double().mean()))
        off += n
    return float(np.mean(acc))


def test_rows_are_each_clients_predictions_and_targets_come_back(tmp_path: Path) -> None:
    """Round 0: each row is softmax(z / 3) of the client's own trained model on the 72 public
    images (720 entries, each image's 10 summing to 1), and each client is scored with that
    model; every client then has a target; round
    1 distils towards it, so the models move differently from a Local run (passes = 0)."""
    sim = Simulation(kt_config(tmp_path / "kt"))
    local = Simulation(kt_config(tmp_path / "local", algorithm_params={"passes": 0}))
    try:
        m = len(sim.fed.public_y)
        assert m == 72 and sim.space.size == 720
        rec = sim.run_round(0, 0.0)
        local.run_round(0, 0.0)
        rows = rec.rows.updates.numpy()
        np.testing.assert_allclose(rows.reshape(6, m, 10).sum(-1), 1.0, atol=1e-5)
        for i, cid in enumerate(rec.rows.client_ids.tolist()):
            np.testing.assert_allclose(rows[i], own_predictions(sim, cid), rtol=0, atol=1e-6)
        assert sim.store.has(TARGET, np.arange(6)).all()
        assert sim.server_state["c"].shape == (6, 6)
        assert rec.extra["client_accuracy_mean"] == pytest.approx(own_accuracy(sim), abs=1e-12)
        sim.run_round(1, 0.0)
        local.run_round(1, 0.0)
        a = sim.store.get("local", np.array([0, 3]))[0]
        b = local.store.get("local", np.array([0, 3]))[0]
        assert not np.allclose(a, b)
        assert torch.equal(sim.global_flat, sim.fed.initial)  # no global model moves
    finally:
        sim.close()
        local.close()


def _state(sim: Simulation) -> list[np.ndarray]:
    ids = np.arange(6)
    out = [sim.store.get(table_name("local", g), ids[ids % 3 == g])[0] for g in range(3)]
    return [*out, sim.store.get(TARGET, ids)[0], sim.server_state["c"].numpy()]


@pytest.mark.parametrize("order", ["distill_first", "local_first"])
def test_vectorized_and_sequential_agree(tmp_path: Path, order: str) -> None:
    got = []
    for v in (True, False):
        cfg = kt_config(tmp_path / str(v), vectorize=v, algorithm_params={"order": order})
        sim = Simulation(cfg)
        try:
            for r in range(2):
                sim.run_round(r, 0.0)
            got.append(_state(sim))
        finally:
            sim.close()
    for a, b in zip(*got, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


WALL = ("wall_time", "slowest_train_seconds", "chunks", "placement")


def test_resume_is_bitwise(tmp_path: Path) -> None:
    kw = {"rounds": 3, "checkpoint_every": 1}
    crashed = kt_config(tmp_path / "crashed", **kw)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(crashed, crash_after=2)  # stops after 2 checkpointed rounds
    run_experiment(resume_config(Path(crashed.output.out)))
    full = kt_config(tmp_path / "full", **kw)
    run_experiment(full)
    evs = [read_events(Path(c.output.out) / "events.jsonl") for c in (crashed, full)]
    strip = [[{k: v for k, v in e.items() if k not in WALL} for e in ev] for ev in evs]
    assert strip[0] == strip[1] and len(strip[0]) == 3
    assert strip[0][-1]["client_accuracy_mean"] is not None
    st = [
        torch.load(Path(c.output.out) / "checkpoint.pt", weights_only=False)
        for c in (crashed, full)
    ]
    assert torch.equal(st[0]["server_state"]["c"], st[1]["server_state"]["c"])


def test_virtual_population_of_100000(tmp_path: Path) -> None:
    """10^5 virtual devices, 8 a round: c spans the round's kept cohort (8 x 8), targets are
    stored only for the clients that took part."""
    cfg = kt_config(
        tmp_path,
        partition="virtual",
        num_clients=100_000,
        clients_per_round=8,
        rounds=2,
        client_test_fraction=0.2,
        eval_clients=8,
    )
    sim = Simulation(cfg)
    try:
        seen: set[int] = set()
        for r in range(2):
            rec = sim.run_round(r, 0.0)
            seen |= set(rec.selected)
            assert rec.extra["clients_evaluated"] > 0
        assert sim.server_state["c"].shape == (8, 8)
        assert sim.store.count(TARGET) == len(seen)
    finally:
        sim.close()


def test_runs_on_the_ray_pool(ray_session: None, tmp_path: Path) -> None:
    """Actors hold one template per group; the rows match the in-process run's."""
    recs = []
    for backend in ("ray", "local"):
        sim = Simulation(kt_config(tmp_path / backend, backend=backend))
        try:
            recs.append(sim.run_round(0, 0.0).rows)
        finally:
            sim.close()
    np.testing.assert_array_equal(recs[0].client_ids, recs[1].client_ids)
    np.testing.assert_allclose(recs[0].updates, recs[1].updates, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (
            {"public_fraction": 0.0},
            "data.public_fraction: algorithm 'ktpfl' uses the server's public set; give a "
            "fraction > 0",
        ),
        ({"defense": "krum"}, "defense 'krum': algorithm 'ktpfl' sends 'preds', not model"),
        ({"attack": "signflip", "attack_fraction": 0.3}, "attack 'signflip': algorithm 'ktpfl'"),
        (  # no global model travels: a download mask would change nothing, silently
            {"compression": "mask", "compression_params": {"direction": "down"}},
            "compression 'mask': masks the global model's downloads, but algorithm 'ktpfl' "
            "sends clients no global model$",
        ),
    ],
)
def test_refusals(tmp_path: Path, kw: dict[str, Any], message: str) -> None:
    with pytest.raises((ConfigError, ValueError), match="^" + message):
        Simulation(kt_config(tmp_path, **kw))


class Rows:
    """Round callback keeping each round's rows (the predictions the clients sent)."""

    needs_rows = True

    def __init__(self) -> None:
        self.rows: dict[int, Any] = {}

    def on_round_end(self, sim: Simulation, record: Any) -> None:
        self.rows[record.round] = record.rows


def test_the_ledger_records_the_predictions(tmp_path: Path) -> None:
    """What is recorded is what is sent: each round's pack holds every client's prediction
    row (720 float32 entries) bit for bit, and the audit replays the run clean."""
    import json

    from ledger.audit import audit_run
    from ledger.pack import Pack
    from ledger.pack_rows import rows_of_pack

    cfg = kt_config(tmp_path / "run", rounds=2, ledger=True, committee=1)
    cap = Rows()
    run_experiment(cfg, callbacks=[cap])
    ledger = Path(cfg.output.out) / "ledger"
    rounds = [json.loads(line) for line in (ledger / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == [0, 1]
    for r in rounds:
        pack = Pack.read(ledger, bytes.fromhex(r["pack"][2:]))
        rows, ids = rows_of_pack(pack, 720)
        sent = cap.rows[r["round"]]
        assert ids == sent.client_ids.tolist()
        np.testing.assert_array_equal(rows, sent.updates.numpy())
        np.testing.assert_allclose(rows.reshape(6, 72, 10).sum(-1), 1.0, atol=1e-5)
    rep = audit_run(Path(cfg.output.out), bls=False)
    assert rep.clean, rep.text()
