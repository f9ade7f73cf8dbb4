"""The one line a run ends with when the ledger fails or the disk fills: it names what happened and
how to go on, and promises a resume only when the run saved a checkpoint to resume from.

Until stop 49 both lines said "resume with: python -m simulator --resume OUT" whatever the run had
saved; a run without ``--checkpoint-every`` (the default) then failed that resume with "has no
checkpoint.pt".
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

import simulator.run.experiment as experiment
from ledger.errors import LedgerRoundError
from simulator.cli import main

ARGS = ["--backend", "local", "--rounds", "2", "--no-progress", "--no-plots"]


def _fail_with(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
    def run(cfg: Any) -> None:
        Path(cfg.output.out).mkdir(parents=True, exist_ok=True)
        raise error

    monkeypatch.setattr(experiment, "run_experiment", run)


def _last_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err.strip().splitlines()[-1]


NO_CKPT = "(it saved no checkpoint to resume from: --checkpoint-every N makes a run resumable)"


def test_a_ledger_failure_offers_a_resume_only_with_a_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    _fail_with(monkeypatch, LedgerRoundError("round 21: the node is gone"))
    code, line = _last_line(capsys, [*ARGS, "--out", str(out)])
    assert code == 1
    assert line == (
        "error: ledger: round 21: the node is gone; rounds before it are recorded; "
        f"events so far are in {out} {NO_CKPT}"
    )
    (out / "checkpoint.pt").write_bytes(b"")
    code, line = _last_line(capsys, [*ARGS, "--out", str(out)])
    assert code == 1
    assert line == (
        "error: ledger: round 21: the node is gone; rounds before it are recorded; "
        f"resume with: python -m simulator --resume {out}"
    )


def test_a_full_disk_offers_a_resume_only_with_a_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    full = OSError(errno.ENOSPC, "No space left on device", str(out / "events.jsonl"))
    _fail_with(monkeypatch, full)
    code, line = _last_line(capsys, [*ARGS, "--out", str(out)])
    assert code == 1
    assert line == (
        f"error: no space left on the disk of {out / 'events.jsonl'}; the rounds before it are "
        f"saved: free some space; events so far are in {out} {NO_CKPT}"
    )
    (out / "checkpoint.pt").write_bytes(b"")
    code, line = _last_line(capsys, [*ARGS, "--out", str(out)])
    assert code == 1
    assert line == (
        f"error: no space left on the disk of {out / 'events.jsonl'}; the rounds before it are "
        f"saved: free some space, then resume with: python -m simulator --resume {out}"
    )
    # any other OSError is not a full disk: it propagates
    _fail_with(monkeypatch, OSError(errno.EACCES, "Permission denied", str(out)))
    with pytest.raises(PermissionError):
        main([*ARGS, "--out", str(out)])


def test_a_damaged_checkpoint_is_refused_in_one_line_and_nothing_is_lost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # until stop 49 a checkpoint cut short (a copy interrupted) ended --resume in a torch
    # traceback, after the finished run's summary.json had been deleted
    out = tmp_path / "run"
    assert main([*ARGS, "--checkpoint-every", "1", "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    (out / "checkpoint.pt").write_bytes(b"")
    capsys.readouterr()
    assert main(["--resume", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"error: output.resume: {out / 'checkpoint.pt'} cannot be read (EOFError: Ran out of "
        "input); the run cannot resume from it\n"
    )
    (out / "checkpoint.pt").write_bytes(before["checkpoint.pt"][:2000])  # a long reason: cut
    assert main(["--resume", str(out)]) == 2  # at a word (it was cut mid-word), and marked
    assert capsys.readouterr().err == (
        f"error: output.resume: {out / 'checkpoint.pt'} cannot be read (RuntimeError: "
        "PytorchStreamReader failed reading zip archive: failed finding central directory. "
        "This is an internal miniz error. If ...); the run cannot resume from it\n"
    )
    (out / "checkpoint.pt").write_bytes(b"")
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert after == {**before, "checkpoint.pt": b""}  # summary.json and events.jsonl kept
