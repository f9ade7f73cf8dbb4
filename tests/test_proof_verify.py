"""``python -m ledger.proof RUN --verify FILE``: VALID only when everything the receipt rests
on holds (the channel, the contract's code and setup, the committee's keys, the round's quorum
signature, the proof), each failure printed with the check that failed; and its command line.

Found by a tester: a round re-committed with non-members' signature, or a contract compiled from
an edited source, verified VALID (exit 0) while the audit reported them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ledger.proof import main as proof_main
from ledger.proof import receipt, verify_receipt
from ledger.tamper import CASES, RUN_CASES
from ledger.tamper_tools import pack_of
from tests.test_ledger_audit import _record

ROUND = 1


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run of tests/test_ledger_audit.py's recording (8 clients, 6 a round, 4 rounds)."""
    return _record(tmp_path_factory.mktemp("proof") / "run", 3)


@pytest.fixture()
def run(recorded: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(recorded, tmp_path / "run"))


@pytest.fixture()
def good(recorded: Path) -> dict[str, Any]:
    return receipt(recorded, ROUND, next(pack_of(recorded, ROUND).clients("update")))


def _checks(run: Path, rec: dict[str, Any]) -> list[tuple[Any, Any, str]]:
    return [f[:3] for f in verify_receipt(run, rec)]


def test_a_round_signed_by_non_members_is_invalid(
    run: Path, good: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert verify_receipt(run, good) == []
    assert CASES["signed by non-members"](run, ROUND) == (ROUND, None, "committee-signature")
    found = verify_receipt(run, good)
    assert [f[:4] for f in found] == [
        (ROUND, None, "committee-signature", "a valid BLS aggregate of a quorum")
    ]
    path = run / "r.json"
    path.write_text(json.dumps(good))
    assert proof_main([str(run), "--verify", str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"round {ROUND} client - committee-signature: expected a valid BLS")
    assert out[1:] == ["INVALID"]
    # the other rounds' receipts rest on their own signatures, which still hold
    other = receipt(run, 0, next(pack_of(run, 0).clients("update")))
    assert verify_receipt(run, other) == []


@pytest.mark.parametrize(
    "case, checks",
    [
        ("contract code replaced", ["contract-code", "contract-code"]),
        ("contract deployed with another committee", ["contract-setup"] * 3),
        ("proof of possession forged", ["committee-pop"]),
        ("config edited in the manifest", ["channel-config"]),
    ],
)
def test_a_run_wide_tamper_case_is_invalid(
    run: Path, good: dict[str, Any], case: str, checks: list[str]
) -> None:
    RUN_CASES[case](run, 0)
    assert _checks(run, good) == [(None, None, c) for c in checks]


def test_an_empty_verify_path_is_named(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # until now "give --round and --client, or --verify FILE": the empty path read as absent
    with pytest.raises(SystemExit) as exc:
        proof_main([str(run), "--verify", ""])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("--verify: the path is empty (give the receipt's file)")


def test_the_help_is_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        proof_main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "``" not in out and ":func:" not in out
    assert "A client's receipt for a round of a run recorded with --ledger" in out
