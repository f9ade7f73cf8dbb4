"""End to end: a run recorded on FLChain, audited clean, then tampered with case by case.

Each tamper case must be reported at the right round (and client, where there is one) and
nowhere else; the untouched run must audit clean.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ledger.audit import audit_run, main
from ledger.tamper import CASES, caught, entries, write_entries

ROUNDS = 4


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from simulator.config import build_config
    from simulator.run import run_experiment

    out = tmp_path_factory.mktemp("ledger") / "run"
    cfg = build_config(flat=dict(
        dataset="digits", num_clients=6, clients_per_round=4, rounds=ROUNDS, local_epochs=1,
        partition="iid", backend="local", defense="median", ledger=True, committee=2,
        out=str(out), progress=False, plots=False, seed=3))
    summary = run_experiment(cfg)
    assert summary["ledger"]["gas_per_round"]["submit"] > 0
    return out


@pytest.fixture()
def run(recorded: Path, tmp_path: Path) -> Path:
    """A fresh copy of the recorded run to tamper with."""
    dst = tmp_path / "run"
    shutil.copytree(recorded, dst)
    return dst


def test_clean_run_audits_clean(recorded: Path, capsys: pytest.CaptureFixture) -> None:
    report = audit_run(recorded)
    assert report.clean, report.text()
    assert report.rounds == ROUNDS and report.submissions == 4 * ROUNDS
    assert report.gas_per_round is not None and report.gas_per_round > 4 * 50_000
    assert main([str(recorded), "-q"]) == 0
    assert "CLEAN" in capsys.readouterr().out


@pytest.mark.parametrize("case", sorted(CASES))
def test_tamper_case_caught_at_its_round_and_client(run: Path, case: str) -> None:
    expected = CASES[case](run)
    rep = audit_run(run, bls=False)
    at_place, only_there = caught(rep.findings, expected)
    assert at_place, f"{case}: expected {expected}, got\n{rep.text()}"
    assert only_there, f"{case}: findings outside round {expected[0]}:\n{rep.text()}"
    assert main([str(run), "-q", "--no-bls"]) == 1


def test_unregistered_sender_is_the_only_finding(run: Path) -> None:
    r, c, _ = CASES["unregistered sender"](run)
    rep = audit_run(run, bls=False, replay=False)
    assert {(f.round, f.client) for f in rep.findings} == {(r, c)}


def test_forged_committee_signature(run: Path) -> None:
    es = entries(run)
    att = dict(es[1]["attestation"])
    es[1]["attestation"] = dict(att, signature=es[2]["attestation"]["signature"])
    write_entries(run, es)
    rep = audit_run(run, replay=False)
    assert {(f.round, f.check) for f in rep.findings} == {(1, "committee-signature")}


@pytest.mark.parametrize("missing", ["ledger/rounds.jsonl", "ledger/chain/genesis.json"])
def test_incomplete_run_dir_exit_2(run: Path, missing: str, capsys: pytest.CaptureFixture) -> None:
    (run / missing).unlink()
    assert main([str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and Path(missing).name in err


def test_bad_input_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main([str(tmp_path / "nope")]) == 2
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "no recorded run found" in err
