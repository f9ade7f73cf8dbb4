"""benchmarks/ledger_audit.py end to end on a tiny study."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import ledger_audit  # noqa: E402


def test_tiny_study_records_audits_and_catches_every_tamper_case(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "study"
    rc = ledger_audit.main(["--runs", "1", "--rounds", "3", "--committee", "1", "--tamper",
                            "--set", "num_clients=8", "--set", "clients_per_round=4",
                            "--set", "local_epochs=1", "--out", str(out)])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    (rec,) = res["recorded"]
    assert rec["same_accuracy"] and rec["ledger_seconds"] > 0
    assert rec["gas_per_round_by_function"]["submit"] > 4 * 50_000
    (audit,) = res["audits"]
    assert audit["clean"] and audit["rounds"] == 3
    assert len(audit["tamper"]) == 7 and set(audit["tamper"].values()) == {"caught"}
    assert "tamper: chain block edited" in capsys.readouterr().out
    assert ledger_audit.main([str(tmp_path / "nothing-here")]) == 2
