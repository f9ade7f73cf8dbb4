"""Every registered algorithm end to end: with every defense and every attack, with resume
(bitwise equal to an uninterrupted run) and with the ledger (the recorded model is the shared
part, and the audit replays it clean).

Each algorithm meets the 12 defenses in turn, the attack cycling through the 11 registered ones
(so every algorithm also meets every attack). Runs are one round on digits with a tiny MLP.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import small_config

from attacks import ATTACKS
from defenses import DEFENSES
from simulator.algorithms import ALGORITHMS
from simulator.round.engine import Simulation
from simulator.run.experiment import resume_config, run_experiment
from simulator.run.output import read_events

#: parameters an algorithm needs to be exercised at all in a 1-3 round run
PARAMS: dict[str, dict[str, Any]] = {"fedbn": {}}
#: model settings an algorithm needs (FedBN keeps BatchNorm on the clients)
MODEL: dict[str, dict[str, Any]] = {"fedbn": {"norm": "batch"}}
#: defense parameters for 8 rows with 2 malicious (Krum needs n > 2f + 2, Bulyan n >= 4f + 3)
DEFENSE: dict[str, dict[str, Any]] = {
    "krum": {"f": 2},
    "multikrum": {"f": 2},
    "bulyan": {"f": 1},
    "trimmedmean": {"f": 2},
    "siren": {"rounds_total": 1},
}
WALL = ("wall_time", "slowest_train_seconds", "chunks", "placement")
#: algorithms whose clients send something other than model updates (KT-pFL's predictions):
#: rules and attacks built for updates refuse them in one line; they run with plain averaging
OTHER_UPLOADS = {a for a in ALGORITHMS if ALGORITHMS.get(a).upload != "update"}


def rule(algorithm: str, defense: str) -> str:
    """``defense``, or plain averaging for an algorithm that sends no model updates, or the
    first rule an algorithm accepts when it does not accept ``defense`` (``Algorithm.rules``:
    FedMA accepts only fedavg)."""
    if algorithm in OTHER_UPLOADS:
        return "fedavg"
    accepted = ALGORITHMS.get(algorithm).rules
    return defense if accepted is None or defense in accepted else accepted[0]


def config(out: Path, algorithm: str, **kw: Any) -> Any:
    flat = {
        "algorithm": algorithm,
        "algorithm_params": PARAMS.get(algorithm, {}),
        "num_clients": 10,
        "clients_per_round": 8,
        "hidden": 8,
        "rounds": 1,
        "public_fraction": 0.05,
        **MODEL.get(algorithm, {}),
        **kw,
    }
    return small_config(out, **flat)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_every_defense_and_attack(algorithm: str, tmp_path: Path) -> None:
    attacks = sorted(a for a in ATTACKS if a != "none")
    offset = sorted(ALGORITHMS).index(algorithm)
    ran = 0
    for i, defense in enumerate(sorted(DEFENSES)):
        attack = attacks[(i + offset) % len(attacks)]
        for d in dict.fromkeys((defense, rule(algorithm, defense))):
            cfg = config(
                tmp_path / f"{d}-{attack}",
                algorithm,
                defense=d,
                defense_params=DEFENSE.get(d, {}),
                attack=attack,
                attack_fraction=0.25,
            )
            try:
                sim = Simulation(cfg)
            except ValueError as e:  # a part built for model updates refuses other uploads
                assert "\n" not in str(e), e
                if algorithm in OTHER_UPLOADS:
                    assert str(e).startswith((f"defense {d!r}: ", f"attack {attack!r}: ")), e
                    assert f"algorithm {algorithm!r} sends" in str(e)
                    continue
                if d == rule(algorithm, d):
                    raise
                # a rule the algorithm does not accept (Algorithm.rules: FedMA)
                prefix = f"defense {d!r}: algorithm {algorithm!r} accepts only the defenses"
                assert str(e).startswith(prefix), e
                continue
            try:
                rec = sim.run_round(0, 0.0)
                where = f"{algorithm} x {d} x {attack}"
                assert torch.isfinite(sim.global_flat).all(), where
                assert len(rec.verdicts) == len(rec.selected) - len(rec.dropped), where
                assert rec.rows is None or rec.rows.updates.shape[1] == sim.space.size, where
                ran += 1
            finally:
                sim.close()
            break  # the defense itself ran: no need for plain averaging
    assert ran > 0, f"{algorithm}: no defense and attack of the matrix ran"


def _strip(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k not in WALL} for e in events]


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_resume_is_bitwise(algorithm: str, tmp_path: Path) -> None:
    kw = {
        "rounds": 3,
        "checkpoint_every": 1,
        "defense": rule(algorithm, "median"),
        "client_test_fraction": 0.2,
    }
    crashed = config(tmp_path / "crashed", algorithm, **kw)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(crashed, crash_after=2)
    run_experiment(resume_config(crashed.output.out))
    full = config(tmp_path / "full", algorithm, **kw)
    run_experiment(full)
    a = read_events(Path(crashed.output.out) / "events.jsonl")
    b = read_events(Path(full.output.out) / "events.jsonl")
    assert [e["round"] for e in a] == [0, 1, 2]
    assert _strip(a) == _strip(b)
    ga = torch.load(Path(crashed.output.out) / "checkpoint.pt", weights_only=False)["global"]
    gb = torch.load(Path(full.output.out) / "checkpoint.pt", weights_only=False)["global"]
    assert torch.equal(ga, gb)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_ledger_records_the_shared_part(algorithm: str, tmp_path: Path) -> None:
    from ledger.audit import audit_run

    cfg = config(
        tmp_path / "run",
        algorithm,
        rounds=2,
        ledger=True,
        committee=1,
        defense=rule(algorithm, "trimmedmean"),
        defense_params={"f": 1} if rule(algorithm, "trimmedmean") == "trimmedmean" else {},
    )
    run_experiment(cfg)
    rep = audit_run(Path(cfg.output.out), bls=False)
    assert rep.clean, rep.text()
    assert rep.rounds == 2
    assert np.isfinite(read_events(Path(cfg.output.out) / "events.jsonl")[-1]["accuracy"])
