"""A study whose disk fills stops in one line (exit 1) naming the file, keeps every finished
run, and says how to go on; ``--resume`` then finishes it.

Until stop 49 the robustness grid died with a Ray traceback (the failed cell's ``error.txt``
could not be written either) and the straggler study with an ``OSError`` traceback.
In the grid the disk fills through ``FEDSENTRY_FAILPOINT`` (:mod:`simulator.run.appendlog`): the
N-th append to an ``events.jsonl`` of this process writes half its bytes and fails with ENOSPC;
in the straggler study as a run writes its cell file; under a ``--ledger`` grid as the
recorder process appends to a ``rounds.jsonl``.
"""

from __future__ import annotations

import errno
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import simulator.run.appendlog as appendlog  # noqa: E402
from benchmarks.robustness_study.main import main as robustness  # noqa: E402
from benchmarks.straggler_study import core  # noqa: E402
from benchmarks.straggler_study.main import main as stragglers  # noqa: E402
from simulator.run.stop import DiskFull, study_stopped  # noqa: E402


def _fill_disk_at(monkeypatch: pytest.MonkeyPatch, append: int | None) -> None:
    """The ``append``-th append to an events.jsonl finds the disk full (None: never)."""
    if append is None:
        monkeypatch.delenv(appendlog.FAILPOINT_ENV, raising=False)
    else:
        monkeypatch.setenv(appendlog.FAILPOINT_ENV, f"events.jsonl:{append}:enospc")
    monkeypatch.setattr(appendlog, "_ARMED", appendlog._Armed())  # re-read the variable


def _last_err(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_the_stop_line_of_each_stop() -> None:
    argv = ["--out", "o"]
    kept = "1 of 2 runs finished under o"
    go = "go on with: python s.py --out o --resume"
    assert study_stopped(KeyboardInterrupt(), "s.py", argv, kept) == (
        f"interrupted: {kept}; {go}",
        130,
    )
    full = f"{kept}: free some space, then {go}"
    assert study_stopped(DiskFull("o/a"), "s.py", argv, kept) == (
        f"error: no space left on the disk of o/a; {full}",
        1,
    )
    enospc = OSError(28, "No space left on device", "o/b")
    assert study_stopped(enospc, "s.py", argv, kept) == (
        f"error: no space left on the disk of o/b; {full}",
        1,
    )
    assert study_stopped(OSError(13, "Permission denied", "o/b"), "s.py", argv, kept) is None
    assert study_stopped(ValueError("x"), "s.py", argv, kept) is None


@pytest.mark.parametrize("ledger", [False, True])
def test_a_robustness_grid_stops_on_a_full_disk_and_resumes(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    ledger: bool,
) -> None:
    # with the ledger the disk fills under the recorder process (its third append to a
    # rounds.jsonl: the second run's first round); until stop 50 that cell was recorded as a
    # LedgerRoundError and the grid went on (exit 0) into a disk that stays full
    from ledger.host import RecorderHost

    out = tmp_path / "rb"
    argv = ["--attack", "labelflip", "--defenses", "fedavg", "median", "--fractions", "0.4"]
    argv += ["--workers", "1", "--out", str(out), "--seeds", "1", "--rounds", "2"]
    argv += ["--set", "num_clients=8", "--set", "clients_per_round=4", "--set", "local_epochs=1"]
    argv += ["--ledger"] if ledger else []
    _fill_disk_at(monkeypatch, None if ledger else 3)  # the second run's first round
    if ledger:
        monkeypatch.setenv(appendlog.FAILPOINT_ENV, "rounds.jsonl:3:enospc")
        if RecorderHost._current is not None:  # a new recorder process reads the failpoint
            RecorderHost._current.stop()
    try:
        assert robustness(argv) == 1
    finally:
        _fill_disk_at(monkeypatch, None)
        if ledger and RecorderHost._current is not None:
            RecorderHost._current.stop()
    failed = out / "runs" / "labelflip-median-f0.4-s0"
    full = failed / "ledger" / "rounds.jsonl" if ledger else failed / "events.jsonl"
    assert _last_err(capsys) == (
        f"error: no space left on the disk of {full}; 1 of 2 runs finished under {out}: free "
        f"some space, then go on with: python benchmarks/robustness.py {' '.join(argv)} --resume"
    )
    assert not (out / "results.json").exists() and not (failed / "error.txt").exists()
    assert robustness([*argv, "--resume"]) == 0
    assert f"resume: 1 of 2 runs finished under {out}" in capsys.readouterr().err
    results = json.loads((out / "results.json").read_text())
    assert [(r["defense"], r["rounds"], r["error"]) for r in results] == [
        ("fedavg", 2, None),
        ("median", 2, None),
    ]


def test_a_straggler_study_stops_on_a_full_disk_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "study"
    argv = ["--population", "60", "--clients-per-round", "6", "--seeds", "1", "--rounds", "6"]
    argv += ["--set", "hidden=16", "--no-progress", "--no-plots"]
    argv += ["--policies", "deadline", "fedbuff", "--out", str(out)]
    real, saved = core.save_cell, []

    def second_fills_the_disk(flat: dict, where: Path, cell: dict) -> None:
        if saved:  # the disk fills as the second run writes its cell file
            raise OSError(errno.ENOSPC, "No space left on device", str(where / core.CELL_FILE))
        saved.append(where)
        real(flat, where, cell)

    monkeypatch.setattr(core, "save_cell", second_fills_the_disk)
    assert stragglers(argv) == 1
    assert _last_err(capsys) == (
        f"error: no space left on the disk of {out / 'runs' / 'fedbuff-s0' / core.CELL_FILE}; "
        f"1 of 2 runs finished under {out}: free some space, then go on with: "
        f"python benchmarks/stragglers.py {' '.join(argv)} --resume"
    )
    assert (out / "runs" / "deadline-s0" / core.CELL_FILE).is_file()
    assert not (out / "runs" / "fedbuff-s0" / core.CELL_FILE).exists()
    monkeypatch.setattr(core, "save_cell", real)
    assert stragglers([*argv, "--resume"]) == 0
    policies = json.loads((out / "results.json").read_text())["policies"]
    assert len(policies) == 2


def test_the_ledger_study_stops_on_a_full_disk_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # until stop 50 the ledger study ended in a traceback (LedgerRoundError or OSError)
    from benchmarks.ledger_study.main import main as ledger_study

    out = tmp_path / "ls"
    argv = ["--tasks", "robustness", "--seeds", "1", "--repeats", "1", "--rounds", "3"]
    argv += ["--no-tamper", "--no-progress", "--out", str(out)]
    _fill_disk_at(monkeypatch, 2)  # an events.jsonl's second line: the ledger arm's
    assert ledger_study(argv) == 1
    assert _last_err(capsys) == (
        f"error: no space left on the disk of {out / 'robustness' / 'ledger-s0' / 'events.jsonl'}"
        f"; the study stopped; the runs it made so far are under {out} (a study does not "
        "resume: run it again)"
    )
