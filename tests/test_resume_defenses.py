"""Checkpoint and resume with Siren's and Sageflow's state: a run crashed after ``k`` rounds and
resumed to ``N`` writes the same events and ends on the same global model, bit for bit, as the
uninterrupted run; each config is chosen so that the state actually matters after the resume
(asserted, so the comparison cannot pass vacuously)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from defenses.siren_reputation import strikes_of
from simulator.config.sections import build_config
from simulator.run.experiment import resume_config, run_experiment
from simulator.run.output import read_events
from simulator.state.store import ClientStore
from tests.conftest import SMALL

WALL = ("wall_time", "slowest_train_seconds", "chunks", "placement")  # wall-clock fields


def read_store(run: Path, ckpt: dict[str, Any], read: Callable[[ClientStore], Any]) -> Any:
    """``read(store)`` on the client-state store of checkpoint ``ckpt`` of run ``run``."""
    spill = run.parent / f"{run.name}-probe"
    with ClientStore.load(run / "state" / "checkpoint", 1 << 20, spill, ckpt["store"]) as store:
        return read(store)


def crash_and_resume(
    tmp_path: Path,
    flat: dict[str, Any],
    crash_after: int,
    read: Callable[[ClientStore], Any] = lambda store: None,
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """Run ``flat`` crashed after ``crash_after`` rounds then resumed, and uninterrupted; check
    that both wrote the same events and final checkpoint (``read`` of their client-state stores
    included); return the crashed run's checkpoint (with ``"read"``: ``read`` of its store),
    the events and the uninterrupted run's final checkpoint."""
    crashed = build_config(flat={**flat, "checkpoint_every": 1, "out": str(tmp_path / "crashed")})
    with pytest.raises(KeyboardInterrupt):
        run_experiment(crashed, crash_after=crash_after)
    at_crash = torch.load(tmp_path / "crashed" / "checkpoint.pt", weights_only=False)
    assert at_crash["next_round"] == crash_after
    at_crash["read"] = read_store(tmp_path / "crashed", at_crash, read)
    run_experiment(resume_config(tmp_path / "crashed"))
    run_experiment(
        build_config(flat={**flat, "checkpoint_every": 1, "out": str(tmp_path / "full")})
    )

    def strip(run: str) -> list[dict[str, Any]]:
        return [
            {k: v for k, v in e.items() if k not in WALL}
            for e in read_events(tmp_path / run / "events.jsonl")
        ]

    got, want = strip("crashed"), strip("full")
    assert [e["round"] for e in got] == list(range(flat["rounds"]))
    assert got == want
    end = torch.load(tmp_path / "crashed" / "checkpoint.pt", weights_only=False)
    ref = torch.load(tmp_path / "full" / "checkpoint.pt", weights_only=False)
    assert end["next_round"] == ref["next_round"] == flat["rounds"]
    assert torch.equal(end["global"], ref["global"])  # bitwise
    assert end["defense"] == ref["defense"]
    assert read_store(tmp_path / "crashed", end, read) == read_store(tmp_path / "full", ref, read)
    return at_crash, want, ref


def reasons(event: dict[str, Any]) -> dict[int, str]:
    return {v["client"]: v["reason"] for v in event["verdicts"]}


def test_siren_strikes_bans_and_episode_survive_a_resume(tmp_path: Path) -> None:
    """Siren's paper variant keeps strikes (hence bans) in the client-state store and the open
    alarm episode in the defense.

    T = 4: a client is banned at max(1, floor(0.45 * 4)) = 1 strike, i.e. at its first rejected
    row. Seed 0, crash after round 3: the checkpoint holds an open episode and five bans; in
    round 4 (the first resumed round) Siren detects again but does not roll back (the episode is
    still open), and banned clients are refused in rounds 4 and 5."""
    flat = {
        **SMALL,
        "rounds": 6,
        "defense": "siren",
        "public_fraction": 0.06,
        "attack": "labelflip",
        "attack_fraction": 0.3,
        "seed": 0,
        "local_epochs": 3,
        "defense_params": {"rounds_total": 4, "variant": "paper"},
    }

    def strikes(store: ClientStore) -> dict[int, float]:
        s = strikes_of(store, np.arange(SMALL["num_clients"]))
        return {int(c): float(s[c]) for c in np.flatnonzero(s)}

    at_crash, events, ref = crash_and_resume(tmp_path, flat, crash_after=4, read=strikes)
    st, banned = at_crash["read"], [c for c, s in sorted(at_crash["read"].items()) if s >= 1]
    # at the checkpoint: banned (one strike) = every client with a rejected row in rounds 0-3,
    # one strike per rejected row (banned rows count), an episode open since round 3's detection
    rejected = [
        (e["round"], c)
        for e in events[:4]
        for c, why in reasons(e).items()
        if why not in ("", "rollback")
    ]
    assert banned == sorted({c for _, c in rejected}) == [2, 4, 6, 8, 9]
    assert st == {c: float(sum(1 for _, d in rejected if d == c)) for c in banned}
    assert at_crash["defense"] == {"in_episode": True}
    r4, r5 = reasons(events[4]), reasons(events[5])
    assert "abnormal-accuracy" in r4.values() and "rollback" not in r4.values()
    assert {c for c, why in r4.items() if why == "banned"} == {4, 8}
    assert {c for c, why in r5.items() if why == "banned"} >= {2, 9}
    assert ref["defense"]["in_episode"] is False  # round 5 closed it


def test_sageflow_stale_rows_and_schedule_survive_a_resume(tmp_path: Path) -> None:
    """Sageflow keeps no state of its own: what it reads across a resume is the engine's (rows
    still in flight, the global models they trained from) and the round (its gamma schedule).
    FedBuff, k = 2, six in flight; gamma halves every 2 rounds (1, 0.5, 0.25 from rounds 0, 2,
    4). Crash after round 2: updates trained from rounds before the checkpoint are still in
    flight and are aggregated, as stale rows, after the resume."""
    flat = {
        **SMALL,
        "num_clients": 20,
        "clients_per_round": 6,
        "rounds": 6,
        "round_policy": "fedbuff",
        "policy_params": {"k": 2},
        "defense": "sageflow",
        "defense_params": {"entropy_threshold": 2.5, "gamma_halving_rounds": 2},
        "public_fraction": 0.1,
    }
    at_crash, events, _ = crash_and_resume(tmp_path, flat, crash_after=3)
    held = {f[0].base_round for f in at_crash["in_flight"]}
    assert len(at_crash["in_flight"]) == 4 and min(held) < 2
    assert held <= set(at_crash["history"])  # their base models are in the checkpoint
    after = [
        (e["round"], v["client"])
        for e in events[3:]
        for v in e["verdicts"]
        if v["reason"] == "stale"
    ]
    assert after and all(e["stale"] for e in events[3:5])
    assert sum(len(e["stale"]) for e in events) == sum(
        list(reasons(e).values()).count("stale") for e in events
    )
