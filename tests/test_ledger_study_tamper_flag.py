"""``benchmarks/ledger_audit.py RUN_DIR --tamper``: refused in one line before any work (until
now the tamper study was skipped without a word, ``"tamper": []``); ``python -m ledger.tamper``
says in one line that it is a library (until now it printed nothing, exit 0)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.ledger_study.cli import parse_args

ROOT = Path(__file__).resolve().parent.parent


def test_tamper_with_run_dirs_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as e:
        parse_args([str(tmp_path), "--tamper", "--out", str(tmp_path / "o")])
    assert e.value.code == 2
    assert capsys.readouterr().err == (
        "error: --tamper applies to the runs the study records; RUN_DIRs are only audited "
        "(leave out --tamper, or record with --tasks)\n"
    )
    assert parse_args([str(tmp_path), "--out", str(tmp_path / "o")]).tamper is False
    assert parse_args(["--out", str(tmp_path / "o")]).tamper is True
    assert parse_args(["--no-tamper", "--out", str(tmp_path / "o")]).tamper is False


def test_ledger_tamper_is_no_command() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "ledger.tamper", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr == (
        "error: ledger.tamper is a library, not a command: its cases are applied by "
        "python benchmarks/ledger_audit.py (the tamper study) and the audit's tests\n"
    )
