"""SIGTERM (a batch system's time limit, ``timeout``, ``docker stop``) stops a run as Ctrl-C does:
one line naming it and how to resume, exit code 143, the ledger holding every round handed over.

Until stop 48 a SIGTERM ended a Ray-backed run with the core worker's stack dump (``*** SIGTERM
received ...``); sent to the whole process group (as Slurm sends it) the run ended aborted (exit
code 134), the ledger's recorder process killed mid-round (303 rounds recorded of 304 events).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli_helper import ROOT

from ledger.audit import audit_run
from simulator.cli import _stopped_line
from simulator.run.stop import _SEEN, Terminated, _terminated, sigterm_raises

RUN = [
    "--backend", "ray", "--num-actors", "1", "--dataset", "digits", "--num-clients", "8",
    "--clients-per-round", "4", "--local-epochs", "1", "--rounds", "1000",
    "--checkpoint-every", "2", "--no-progress", "--no-plots", "--ledger", "--committee", "3",
]  # fmt: skip


def _cfg(out: str, every: int) -> SimpleNamespace:
    return SimpleNamespace(output=SimpleNamespace(out=out, checkpoint_every=every))


def test_the_stop_line_names_the_signal_and_the_resume_command(tmp_path: Path) -> None:
    out = str(tmp_path)
    no_ckpt = (
        f"events so far are in {out} (it saved no checkpoint to resume from: "
        "--checkpoint-every N makes a run resumable)"
    )
    assert _stopped_line(KeyboardInterrupt(), None) == "interrupted"
    assert _stopped_line(Terminated(), _cfg(out, 0)) == f"terminated (SIGTERM); {no_ckpt}"
    # checkpoints on, stopped before the first (until stop 50 it said to turn them on)
    assert _stopped_line(Terminated(), _cfg(out, 5)) == (
        f"terminated (SIGTERM); events so far are in {out} (it stopped before its first "
        "checkpoint: run it again)"
    )
    (tmp_path / "checkpoint.pt").write_bytes(b"")
    out = _cfg(out, 5)
    assert _stopped_line(KeyboardInterrupt(), out) == (
        f"interrupted; resume with: python -m simulator --resume {tmp_path}"
    )
    assert _stopped_line(Terminated(), out) == (
        f"terminated (SIGTERM); resume with: python -m simulator --resume {tmp_path}"
    )
    # a SIGTERM that lands in a blocking Ray call comes out as a plain KeyboardInterrupt
    # (Ray's signal check raises that whatever the handler raised): the handler's record names it
    try:
        with pytest.raises(Terminated):
            _terminated(signal.SIGTERM, None)
        assert _stopped_line(KeyboardInterrupt(), out).startswith("terminated (SIGTERM); ")
    finally:
        _SEEN.clear()


def test_an_error_after_a_sigterm_is_the_stop_and_the_handler_is_put_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RuntimeError, match="an actor died"):  # no SIGTERM: the error itself
        with sigterm_raises():
            assert signal.getsignal(signal.SIGTERM) is _terminated
            raise RuntimeError("an actor died")
    with pytest.raises(Terminated, match="after SIGTERM: an actor died"):
        with sigterm_raises():
            _SEEN.append(signal.SIGTERM)  # what the handler records
            raise RuntimeError("an actor died")  # e.g. Ray's worker, ended by the same signal
    assert signal.getsignal(signal.SIGTERM) is before


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


@pytest.mark.slow  # ~25 s: Ray, the recorder and a real run (CI runs the slow tests too)
def test_sigterm_to_the_process_group_stops_a_ray_ledger_run_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "simulator", *RUN, "--out", str(out)],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, as a batch job's step
    )
    try:
        deadline = time.monotonic() + 180
        while not ((out / "checkpoint.pt").is_file() and _lines(out / "events.jsonl") >= 3):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the run did not get to round 3: {proc.communicate()[1][-2000:]}")
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGTERM)  # the driver, its Ray and the recorder alike
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == (
        f"terminated (SIGTERM); resume with: python -m simulator --resume {out}"
    )
    assert "SIGTERM received" not in err  # Ray's core worker's stack dump
    assert "recorder process exited" not in err, err  # the recorder ignored it and closed
    events = _lines(out / "events.jsonl")
    assert 3 <= events < 1000
    # every round with an event was handed over, and the session closed with all of them in
    assert _lines(out / "ledger" / "rounds.jsonl") >= events
    rep = audit_run(out)
    assert rep.clean, rep.text()
    assert rep.rounds >= events


def test_a_sigterm_during_ray_init_is_the_applications_stop() -> None:
    # during ray.init Ray's own handler is in place and exits with code 15, no word said (a
    # SIGTERM 2-6 s into a run, a grid or a study ended with exit 15 and an empty log until
    # stop 50): it is handed to the application's handler, whose stop is one line, exit 143
    from actors.ray_setup import _own_sigterm

    try:
        with pytest.raises(Terminated), sigterm_raises(), _own_sigterm():
            raise SystemExit(signal.SIGTERM)  # what Ray's handler does
        assert _SEEN == [signal.SIGTERM]
        with pytest.raises(SystemExit), sigterm_raises(), _own_sigterm():
            raise SystemExit(3)  # any other exit is left alone
    finally:
        _SEEN.clear()
