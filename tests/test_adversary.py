"""Attacks in the round loop: malicious sets, model attacks on rows, data attacks in training,
detection counts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from conftest import run_records

from simulator.config.sections import Config
from simulator.round.adversary import detection
from simulator.round.engine import Simulation
from simulator.training.flat import FlatLayout
from simulator.training.models import ModelSpec
from simulator.training.spec import LocalSpec
from simulator.training.stacked import train_clients

MakeConfig = Callable[..., Config]


def test_detection_counts_by_hand() -> None:
    # arrived {1,2,3,4}; malicious {2,3} (9 did not arrive); rejected {3,4} (7 did not arrive)
    assert detection([1, 2, 3, 4], [2, 3, 9], [3, 4, 7]) == {"tp": 1, "fp": 1, "fn": 1, "tn": 1}


class Capture:
    """Wraps a defense and keeps the batches it sees."""

    def __init__(self, inner: object) -> None:
        self.inner, self.batches = inner, []
        self.linear = False

    def __call__(self, batch, ctx):  # noqa: ANN001, ANN204
        self.batches.append(batch)
        return self.inner(batch, ctx)

    def state_dict(self) -> dict:
        return {}


def first_round_rows(cfg: Config) -> tuple[dict[int, np.ndarray], list[int]]:
    sim = Simulation(cfg)
    cap = Capture(sim.defense)
    sim.defense = cap  # type: ignore[assignment]
    try:
        rec = sim.run_round(0, 0.0)
    finally:
        sim.close()
    b = cap.batches[0]
    return {int(c): b.updates[i].numpy() for i, c in enumerate(b.client_ids)}, rec.extra[
        "malicious"
    ]


def test_signflip_rows_are_minus_four_times_the_honest_ones(make_config: MakeConfig) -> None:
    clean, _ = first_round_rows(make_config("clean", num_clients=10, clients_per_round=10))
    attacked, mal = first_round_rows(
        make_config(
            "atk",
            num_clients=10,
            clients_per_round=10,
            attack="signflip",
            attack_fraction=0.3,
            attack_params={"scale": 4},
        )
    )
    assert len(mal) == 3  # round(0.3 * 10) of a fixed seeded set, all selected
    for c, row in attacked.items():
        expected = -4 * clean[c] if c in mal else clean[c]
        np.testing.assert_allclose(row, expected, rtol=1e-6, atol=1e-7)


def test_labelflip_trains_on_reversed_labels() -> None:
    from attacks import make_attack

    torch.manual_seed(0)
    x = torch.randn(30, 4)
    y = torch.randint(0, 3, (30,))
    model = ModelSpec("logreg", (4,), 3).build(seed=0)
    lay = FlatLayout(model)
    g = lay.flatten(model)
    idx = [np.arange(0, 15), np.arange(15, 30)]
    spec = LocalSpec(0.1, 5, data_attack=make_attack("labelflip"), num_classes=3)
    out = train_clients(model, lay, g, x, y, idx, [2, 2], [11, 12], spec, poisoned=[True, False])
    # reference: client 0 trained honestly on labels 2 - y
    ref = train_clients(model, lay, g, x, 2 - y, idx[:1], [2], [11], LocalSpec(0.1, 5))
    hon = train_clients(model, lay, g, x, y, idx[1:], [2], [12], LocalSpec(0.1, 5))
    torch.testing.assert_close(out.updates[0], ref.updates[0], rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(out.updates[1], hon.updates[0], rtol=1e-6, atol=1e-7)


def test_redraw_mode_counts_and_detection_fields(make_config: MakeConfig, tmp_path: Path) -> None:
    cfg = make_config(
        num_clients=10,
        clients_per_round=5,
        rounds=3,
        attack="labelflip",
        attack_fraction=0.4,
        malicious_mode="redraw",
        defense="krum",
        defense_params={"f": 1},
    )
    recs = run_records(cfg)
    draws = [r.extra["malicious"] for r in recs]
    assert all(len(m) == 2 and set(m) <= set(r.selected) for m, r in zip(draws, recs, strict=True))
    assert len({tuple(m) for m in draws}) > 1  # re-drawn, not fixed
    for r in recs:
        d = r.extra["detection"]
        assert d["tp"] + d["fn"] == 2 and d["tp"] + d["fp"] == len(r.rejected) == 4


def test_labelflip_hurts_fedavg_and_siren_recovers(tmp_path: Path) -> None:
    """Seeded end to end: 40% label flip on Siren's setting (10 IID clients, all selected)."""
    from simulator.config.sections import build_config

    base = {
        "backend": "local",
        "partition": "iid",
        "num_clients": 10,
        "clients_per_round": 10,
        "local_epochs": 5,
        "public_fraction": 0.07,
        "rounds": 15,
        "progress": False,
        "plots": False,
    }

    def final(name: str, **kw: object) -> float:
        sim = Simulation(build_config(flat={**base, **kw, "out": str(tmp_path / name)}))
        try:
            return sim.run()[-1].accuracy
        finally:
            sim.close()

    clean = final("clean")
    fedavg = final("fedavg", attack="labelflip", attack_fraction=0.4)
    siren = final(
        "siren",
        attack="labelflip",
        attack_fraction=0.4,
        defense="siren",
        defense_params={"rounds_total": 15},
    )
    assert clean > 0.9
    assert fedavg < clean - 0.1  # the attack visibly hurts plain averaging
    assert siren > fedavg + 0.05  # Siren recovers most of it (seed 0: 0.900 vs 0.791)
    assert siren >= 0.9 * clean


def test_detection_summary_by_hand() -> None:
    from simulator.run.output import summarize

    events = [
        {
            "round": 0,
            "detection": {"tp": 1, "fp": 1, "fn": 1, "tn": 3},
            "verdicts": [{"client": 4, "kept": False, "reason": "abnormal-accuracy"}],
        },
        {
            "round": 1,
            "detection": {"tp": 2, "fp": 0, "fn": 0, "tn": 4},
            "verdicts": [{"client": 4, "kept": False, "reason": "banned"}],
        },
        {
            "round": 2,
            "detection": {"tp": 1, "fp": 1, "fn": 1, "tn": 3},
            "verdicts": [
                {"client": 4, "kept": False, "reason": "banned"},
                {"client": 7, "kept": False, "reason": "banned"},
            ],
        },
    ]
    s = summarize(events)
    # tp 4, fp 2, fn 2, tn 10
    assert s["detection_precision"] == 4 / 6 and s["detection_recall"] == 4 / 6
    assert s["detection_f1"] == 8 / 12 and s["benign_false_rejection"] == 2 / 12
    assert s["first_ban_round"] == {4: 1, 7: 2}


def test_backdoor_success_rate_is_measured(make_config: MakeConfig) -> None:
    clean = make_config("clean", rounds=8, partition="iid", local_epochs=2)
    bd = make_config(
        "bd",
        rounds=8,
        partition="iid",
        local_epochs=2,
        attack="backdoor",
        attack_fraction=0.4,
        attack_params={"target": 0, "poison_fraction": 1.0},
    )
    runs = {}
    for name, cfg in (("clean", clean), ("bd", bd)):
        runs[name] = run_records(cfg)
    assert runs["clean"][-1].extra["attack_success_rate"] is None
    asr = runs["bd"][-1].extra["attack_success_rate"]
    assert asr is not None and asr > 0.5  # the trigger now steers most inputs to class 0


def test_model_replacement_poisons_training_with_its_backdoor(make_config: MakeConfig) -> None:
    cfg = make_config(
        rounds=1,
        num_clients=10,
        clients_per_round=10,
        attack="model_replacement",
        attack_fraction=0.2,
        attack_params={"target": 0},
    )
    sim = Simulation(cfg)
    try:
        assert sim.spec.data_attack is sim.attack.data
        assert sim.adversary.trigger is sim.attack.data
        rec = sim.run_round(0, 0.0)
        assert len(rec.extra["malicious"]) == 2 and rec.extra["attack_success_rate"] is not None
    finally:
        sim.close()
