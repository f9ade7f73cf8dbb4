"""End to end: a run recorded on FLChain, audited clean, then tampered with case by case.

Each tamper case (:mod:`ledger.tamper`) is applied at the first, a middle and the last round; the
audit must report it at that round (and client, where there is one) and at no other round. The
untouched run must audit clean, and every check the audit makes must be triggered by a case.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from ledger.audit import audit_run, main
from ledger.audit_names import CHECKS
from ledger.audit_round import BLOB_CHECK
from ledger.proof import receipt, verify_receipt
from ledger.tamper import CASES, RECEIPT_CASES, RUN_CASES, caught
from ledger.tamper_chain import commitment_from_another_run
from ledger.tamper_tools import NotApplicable

ROUNDS = 4
POSITIONS = (0, 2, ROUNDS - 1)
LAST_ONLY = ("commitment left out of the chain", "last round dropped from index, export and head")
ROOT = Path(__file__).resolve().parent.parent


def _record(out: Path, seed: int) -> Path:
    from simulator.config.sections import build_config
    from simulator.run.experiment import run_experiment

    cfg = build_config(
        flat=dict(
            dataset="digits",
            num_clients=8,
            clients_per_round=6,
            rounds=ROUNDS,
            local_epochs=1,
            partition="iid",
            backend="local",
            defense="multikrum",
            defense_params={"f": 1},
            attack="signflip",
            attack_fraction=0.25,
            ledger=True,
            committee=3,
            out=str(out),
            progress=False,
            plots=False,
            seed=seed,
        )
    )
    run_experiment(cfg)
    return out


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("ledger")
    return _record(base / "run", 3), _record(base / "other", 4)


@pytest.fixture()
def run(recorded: tuple[Path, Path], tmp_path: Path) -> Path:
    """A fresh copy of the recorded run to tamper with."""
    return Path(shutil.copytree(recorded[0], tmp_path / "run"))


def test_clean_run_audits_clean(recorded: tuple[Path, Path], capsys: pytest.CaptureFixture) -> None:
    for d in recorded:
        report = audit_run(d)
        assert report.clean, report.text()
        assert report.rounds == ROUNDS and report.submissions == 6 * ROUNDS
        assert report.gas_per_round is not None and report.gas_per_round > 50_000
        # the audit's gas (read back from the chain's receipts) is what the run recorded
        recorded_gas = json.loads((d / "summary.json").read_text())["ledger"]["gas_per_round"]
        assert report.gas_per_round == recorded_gas
    assert main([str(recorded[0]), "-q", "--jobs", "2"]) == 0
    assert "CLEAN" in capsys.readouterr().out


def test_the_replay_runs_on_one_torch_thread(recorded, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every replayed round sees one torch thread, and the caller's count comes back after."""
    import torch

    from ledger.replay import Replayer

    seen: list[int] = []
    step = Replayer.step

    def spy(self, *a, **kw):
        seen.append(torch.get_num_threads())
        return step(self, *a, **kw)

    monkeypatch.setattr(Replayer, "step", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert audit_run(recorded[0]).clean
        assert seen == [1] * ROUNDS
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def _check(findings: list, expected: tuple, case: str) -> None:
    at_place, only_there = caught(findings, expected)
    text = "\n".join(f.line() for f in findings)
    assert at_place, f"{case}: expected {expected}, got\n{text}"
    assert only_there, f"{case}: findings outside round {expected[0]}:\n{text}"


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_tamper_case_caught_at_its_round_and_client(run: Path, case: str, position: int) -> None:
    try:
        expected = CASES[case](run, position)
    except NotApplicable:  # these apply to the last round only
        assert case in LAST_ONLY and position != ROUNDS - 1
        return
    assert expected[0] == position or case == "index lines swapped"
    _check(audit_run(run).findings, expected, case)


@pytest.mark.parametrize("position", POSITIONS)
def test_commitment_replayed_from_another_run(
    run: Path, recorded: tuple[Path, Path], position: int
) -> None:
    expected = commitment_from_another_run(recorded[1])(run, position)
    _check(audit_run(run).findings, expected, "commitment from another run")


@pytest.mark.parametrize("case", sorted(RUN_CASES))
def test_run_wide_tamper_case(run: Path, case: str) -> None:
    expected = RUN_CASES[case](run, 0)
    _check(audit_run(run).findings, expected, case)
    assert main([str(run), "-q"]) == 1


@pytest.mark.parametrize("position", POSITIONS)
def test_receipts(run: Path, position: int) -> None:
    from ledger.tamper_tools import pack_of

    good = receipt(run, position, next(pack_of(run, position).clients("update")))
    assert verify_receipt(run, good) == []
    expected, forged = RECEIPT_CASES["proof for a client not in the round"](run, position)
    found = verify_receipt(run, forged)
    assert [f[:3] for f in found] == [expected]


def test_a_receipt_edited_or_malformed(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # until stop 50 a receipt's samples and round were coerced with int(): 164.9 or "164"
    # verified VALID; a receipt that was no object, or without its round, was a traceback
    import json

    from ledger.proof import main as proof_main
    from ledger.tamper_tools import pack_of

    good = receipt(run, 1, next(pack_of(run, 1).clients("update")))
    for samples in (good["samples"] + 0.5, str(good["samples"]), float(good["samples"])):
        # a malformed receipt is bad input (exit 2), not a failed proof (once INVALID, exit 1)
        with pytest.raises(ValueError, match=f"its 'samples' is {samples!r}, not an integer"):
            verify_receipt(run, {**good, "samples": samples})
    path = tmp_path / "r.json"
    for doc, line in [
        ("[]", f"--verify {path}: not a receipt (a JSON list)"),
        ("{}", "not a receipt: its 'round' is missing"),
        (json.dumps({**good, "round": 1.5}), "not a receipt: its 'round' is 1.5, not an integer"),
        ("{", f"--verify {path}: not JSON (Expecting property name enclosed in double quotes: "),
    ]:
        path.write_text(doc)
        assert proof_main([str(run), "--verify", str(path)]) == 2
        assert capsys.readouterr().err.startswith(f"error: {line}")
    assert proof_main([str(run), "--verify", str(tmp_path / "none.json")]) == 2
    assert capsys.readouterr().err == (
        f"error: --verify {tmp_path / 'none.json'}: cannot be read (No such file or directory)\n"
    )
    # a round the ledger does not hold (e.g. its rounds.jsonl line torn by a kill) names what
    # it holds (until stop 51 only "round 3 is not in RUN")
    index = run / "ledger/rounds.jsonl"
    lines = index.read_bytes().splitlines(keepends=True)
    index.write_bytes(b"".join(lines[:-1]) + lines[-1][:40])
    assert proof_main([str(run), "--round", str(ROUNDS - 1), "--client", "0"]) == 2
    assert capsys.readouterr().err == (
        f"error: round {ROUNDS - 1} is not in {run}: its ledger records rounds 0 to {ROUNDS - 2}\n"
    )


def test_every_check_has_a_tamper_case_and_is_documented() -> None:
    src = "".join(
        (ROOT / "ledger" / f).read_text()
        for f in ("tamper.py", "tamper_aggregator.py", "tamper_chain.py")
    )
    triggered = set(re.findall(r'return [^\n,]+, [^\n,]+, "([a-z-]+)"', src))
    triggered |= set(re.findall(r'_entry_edited\("[^"]+", "([a-z-]+)"\)', src))
    triggered |= {"committee-signature"}  # commitment_from_another_run, tested above
    assert triggered == set(CHECKS), sorted(triggered ^ set(CHECKS))
    emitted = set(BLOB_CHECK.values())
    for f in (
        "audit_checks.py",
        "audit_channel.py",
        "audit_round.py",
        "audit_replay.py",
        "audit_committee.py",
        "proof.py",
        "proof_verify.py",
    ):
        text = (ROOT / "ledger" / f).read_text()
        emitted |= {c for c in re.findall(r'"([a-z]+(?:-[a-z]+)*)"', text) if c in CHECKS}
        for name in re.findall(r'(?:yield|\.append\(\()[^,\n]+, [^,\n]+, "([a-z-]+)"', text):
            assert name in CHECKS, f"{f}: check {name!r} is not in ledger.audit_names.CHECKS"
    assert emitted == set(CHECKS), sorted(set(CHECKS) - emitted)
    readme = (ROOT / "README.md").read_text()
    assert all(f"`{c}`" in readme for c in CHECKS), [c for c in CHECKS if f"`{c}`" not in readme]


@pytest.mark.parametrize(
    "missing", ["ledger/rounds.jsonl", "ledger/chain/genesis.json", "ledger/chain/head.json"]
)
def test_incomplete_run_dir_exit_2(run: Path, missing: str, capsys: pytest.CaptureFixture) -> None:
    (run / missing).unlink()
    assert main([str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and Path(missing).name in err


def test_bad_input_exit_2(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    empty = tmp_path / "empty"  # (tmp_path may hold the run)
    empty.mkdir()
    assert main([str(tmp_path / "nope")]) == 2
    assert main([str(empty)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "no recorded run found" in err
    # beside a run, a path that holds none (until stop 50 the run alone was audited: CLEAN)
    assert main([str(run), str(empty)]) == 2
    assert capsys.readouterr().err == (
        f"error: {tmp_path / 'empty'}: no recorded run found (no ledger/manifest.json; was the "
        "run made with --ledger?)\n"
    )


def test_a_run_still_being_recorded_is_refused(run: Path, capsys: pytest.CaptureFixture) -> None:
    # audited while its recorder wrote (stop 49), a run showed false findings: round-off-chain
    # (a commitment mined, its rounds.jsonl line not yet written) and chain-block (head behind)
    import os

    from ledger.session_start import being_recorded, lock_ledger

    assert not being_recorded(run / "ledger")
    fd = lock_ledger(run / "ledger")  # what the recorder holds while the run goes on
    try:
        assert being_recorded(run / "ledger")
        assert main([str(run)]) == 2
        assert capsys.readouterr().err == (
            f"error: {run}: the run is still being recorded (its recorder holds ledger/.lock): "
            "audit it once the run has ended\n"
        )
    finally:
        os.close(fd)
    assert not being_recorded(run / "ledger")
    assert main([str(run), "-q"]) == 0
    (run / "ledger" / ".lock").unlink()  # a run recorded before the lock existed: no lock file
    assert not being_recorded(run / "ledger") and main([str(run), "-q"]) == 0


def test_a_run_that_did_not_finish_says_so(run: Path) -> None:
    # a stopped run audits clean over the rounds it recorded; until stop 49 nothing said that
    # the run had planned more
    assert not any("did not finish" in n for n in audit_run(run).notes)
    (run / "summary.json").unlink()  # as a run stopped before its end leaves it
    report = audit_run(run)
    assert report.clean
    assert [n for n in report.notes if "did not finish" in n] == [
        f"the run did not finish (no summary.json): {ROUNDS} rounds recorded of the {ROUNDS} "
        "planned, all of them audited; it saved no checkpoint to resume from"
    ]
    # the rounds planned are the manifest's config's (proven by the channel id), not
    # config.yaml's (a config.yaml edited or removed used to change the note)
    (run / "checkpoint.pt").write_bytes(b"")
    (run / "config.yaml").unlink()
    assert audit_run(run).notes[-1] == (
        f"the run did not finish (no summary.json): {ROUNDS} rounds recorded of the {ROUNDS} "
        f"planned, all of them audited; python -m simulator --resume {run} records the rest"
    )
