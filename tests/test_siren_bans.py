"""Siren's bans under the paper rule, from the client-state store to the rows and the ledger.

The strikes live in the store (``defenses/siren_reputation.py``); the client side marks the rows
of banned clients with the batch signal ``"banned"`` (``RoundPlan.banned`` -> ``make_batch``),
the rule rejects them unjudged, and the ledger's replay takes the signal from the verdict
document (``ledger.round_build.banned_rows``): a run recorded with a committee, whose replay
would refuse to attest a round it cannot re-derive, audits clean.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import small_config
from test_replay import BASE, PUBLIC, STALE, assert_replays, reasons, run, stale

from defenses.siren_reputation import (
    NOT_JUDGED,
    NOT_SEEN,
    banned_among,
    declare,
    strikes_of,
    update_strikes,
)
from ledger.audit import audit_run
from ledger.pack_rows import banned_rows
from ledger.tamper_tools import flip
from simulator.policies.base import Arrival
from simulator.round.collect import make_batch
from simulator.round.types import InFlight
from simulator.state.store import ClientStore


def verdicts(*rows: tuple[int, bool, str]) -> list[dict[str, Any]]:
    return [{"client": c, "kept": k, "reason": r, "weight": 0.0, "score": None} for c, k, r in rows]


def test_each_rule_counts_its_own_verdicts() -> None:
    # 1 judged and rejected, 2 rejected as banned, 3 malformed (never seen by the rule), 4 kept
    round_ = verdicts(
        (1, False, "abnormal-accuracy"),
        (2, False, "banned"),
        (3, False, "non-finite"),
        (4, True, ""),
    )
    ids = np.array([1, 2, 3, 4])
    with ClientStore(1 << 20) as paper, ClientStore(1 << 20) as population:
        update_strikes(paper, round_, 0.5, NOT_SEEN)
        update_strikes(population, round_, 0.5, NOT_JUDGED)
        # the paper rule's own "banned" rejections count, rows it never saw do not
        assert strikes_of(paper, ids).tolist() == [1.0, 1.0, 0.0, 0.0]
        # the population rule's "banned" is decided before training; a malformed row counts
        assert strikes_of(population, ids).tolist() == [1.0, 0.0, 1.0, 0.0]


def test_banned_among_by_hand() -> None:
    with ClientStore(1 << 20) as store:
        declare(store)
        store.put("siren_strikes", np.array([3, 5, 8]), np.array([0.5, 2.0, 3.0]))
        assert banned_among(store, [8, 3, 5, 9, 5], 2) == {5, 8}  # strikes >= 2
        assert banned_among(store, [3, 9], 1) == set() and banned_among(store, [], 1) == set()


def flight(c: int, base: int) -> InFlight:
    return InFlight(Arrival(c, base, 1.0), np.full(2, float(c), np.float32), 4, 0.5)


def test_rows_of_banned_clients_carry_the_signal() -> None:
    # client 5 twice (fresh and carried from round 1): a ban is the client's, so both rows
    arrived = [flight(5, 2), flight(3, 2), flight(5, 1), flight(7, 0)]
    b = make_batch(arrived, 2, {5, 7, 9})
    assert b.client_ids.tolist() == [5, 3, 5, 7]
    assert b.signals["banned"].tolist() == [True, False, True, True]
    assert make_batch(arrived, 2).signals["banned"].tolist() == [False] * 4


def test_bans_from_the_verdict_document() -> None:
    doc = {"verdicts": verdicts((3, False, "banned"), (5, True, ""), (7, False, "banned"))}
    got = banned_rows(np.array([5, 3, 7, 3]), doc)
    assert got.dtype == bool and got.tolist() == [False, True, True, True]
    with pytest.raises(ValueError, match="verdict document without readable verdicts"):
        banned_rows(np.array([5]), {"verdicts": [{"client": 5}]})


def test_paper_bans_of_stale_rows_replay(tmp_path: Path) -> None:
    """Stale rows: a client banned after it trained is refused when its row arrives."""
    cfg = small_config(
        tmp_path,
        **{
            **BASE,
            **PUBLIC,
            **STALE,
            "defense": "siren",
            "seed": 1,
            "defense_params": {"rounds_total": 4, "variant": "paper"},
        },
    )
    initial, cap = run(cfg)
    assert stale(cap) and "banned" in reasons(cap)
    late = [
        (r, c)
        for r, b in cap.rows.items()
        for c, tau, ban in zip(b.client_ids, b.base_rounds, b.signals["banned"], strict=True)
        if ban and tau < r
    ]
    assert late, "no stale row of a banned client"
    assert_replays(cfg, initial, cap)


def test_paper_variant_on_the_ledger_audits_clean(tmp_path: Path) -> None:
    """T = 4: one rejected row bans. The committee re-derives every round (with the bans of
    the verdict document) and the audit replays them clean; some recorded rows are banned. A
    corrupt verdict document is reported in its round, which is then not replayed."""
    cfg = small_config(
        tmp_path / "run",
        **{**BASE, **PUBLIC, "seed": 2, "defense": "siren", "ledger": True, "committee": 2},
        defense_params={"rounds_total": 4, "variant": "paper"},
    )
    from simulator.run.experiment import run_experiment

    run_experiment(cfg)
    rep = audit_run(tmp_path / "run", bls=False)
    assert rep.clean, rep.text()
    assert rep.rounds == BASE["rounds"]
    docs = [
        json.loads(line)["verdicts"]
        for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()
    ]
    assert any(v["reason"] == "banned" for vs in docs for v in vs)
    # the verdict document is a replay input now: a corrupt one leaves its round unreplayed
    # (a note), not replayed with unknown bans
    flip(tmp_path / "run", 2, "verdicts")
    rep = audit_run(tmp_path / "run", bls=False)
    assert {(f.round, f.check) for f in rep.findings} == {(2, "verdict-blob")}
    assert "round 2: not replayed (its inputs are corrupt)" in rep.notes
