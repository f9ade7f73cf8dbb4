"""kill -9 during a ``--ledger`` run, then ``--resume``: the finished run audits clean and its
events equal an uninterrupted run's (ledger v2).

Real SIGKILLs of the CLI driver (``FEDSENTRY_FAILPOINT``, :mod:`simulator.run.appendlog`): in the
middle of writing an event (a torn last line) and between two rounds. The recorder process dies
with its driver (``PR_SET_PDEATHSIG``); the resumed run's recorder re-imports the chain export,
drops torn records, and checks every round it recomputes against the ledger.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helper import run_cli, strip_wall

from ledger.audit import audit_run
from simulator.run.output import read_events

ROUNDS = 5
RUN = [
    "--backend",
    "local",
    "--dataset",
    "digits",
    "--num-clients",
    "8",
    "--clients-per-round",
    "4",
    "--local-epochs",
    "1",
    "--rounds",
    str(ROUNDS),
    "--checkpoint-every",
    "1",
    "--no-progress",
    "--no-plots",
    "--ledger",
    "--committee",
    "3",
    "--defense",
    "median",
]


def _recorder_gone(out: Path) -> bool:
    """No process holds the ledger's lock (the recorder died with its driver)."""
    import fcntl

    with open(out / "ledger/.lock", "r+b") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ledger-kill") / "reference"
    proc = run_cli(*RUN, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.parametrize(
    "failpoint",
    # torn last line (default suite), and between rounds (~16 s more: slow; CI runs both)
    ["events.jsonl:3", pytest.param("events.jsonl:3:after", marks=pytest.mark.slow)],
)
def test_sigkill_during_a_ledger_run_then_resume(
    tmp_path: Path, reference: Path, failpoint: str
) -> None:
    out = tmp_path / "killed"
    proc = run_cli(*RUN, "--out", str(out), failpoint=failpoint)
    assert proc.returncode == -9, proc.stderr
    raw = (out / "events.jsonl").read_bytes()
    assert raw.endswith(b"\n") == failpoint.endswith(":after")  # torn, or between rounds
    import time

    for _ in range(100):  # the recorder follows its driver within moments
        if _recorder_gone(out):
            break
        time.sleep(0.05)
    assert _recorder_gone(out)
    proc = run_cli("--resume", str(out))
    assert proc.returncode == 0, proc.stderr
    rep = audit_run(out)
    assert rep.clean, rep.text()
    assert rep.rounds == ROUNDS
    assert strip_wall(read_events(out / "events.jsonl")) == strip_wall(
        read_events(reference / "events.jsonl")
    )
    assert (out / "ledger/rounds.jsonl").read_bytes() == (
        reference / "ledger/rounds.jsonl"
    ).read_bytes()


@pytest.mark.slow
def test_recorder_killed_between_commit_and_index_line(tmp_path: Path, reference: Path) -> None:
    """The recorder dies mid-write of the third ``rounds.jsonl`` line, after round 2's
    commitment is on chain: the resumed run rebuilds that line from the chain event and the
    round's pack, byte for byte the line the recorder would have written (counts included).
    Marked ``slow`` (~20 s): in the default suite, ``test_ledger_run``'s ``rounds.jsonl:2`` case
    kills the recorder at the same point and audits the resumed run."""
    out = tmp_path / "killed"
    proc = run_cli(*RUN, "--out", str(out), failpoint="rounds.jsonl:3")
    assert proc.returncode != 0 and "--resume" in proc.stderr
    assert not (out / "ledger/rounds.jsonl").read_bytes().endswith(b"\n")  # torn line
    proc = run_cli("--resume", str(out))
    assert proc.returncode == 0, proc.stderr
    rep = audit_run(out)
    assert rep.clean and rep.rounds == ROUNDS, rep.text()
    assert (out / "ledger/rounds.jsonl").read_bytes() == (
        reference / "ledger/rounds.jsonl"
    ).read_bytes()
