"""Stopping the ledger study (Ctrl-C, SIGTERM): every arm's run ends at its next turn, an arm
that never comes back is named, the recorder process leaves quietly when its driver is gone,
and the study ends in one line.

Until stop 49 a stopped study left its arms running (the main thread's interrupted
``Thread.join`` even marked them as ended: CPython 3.11), printed tracebacks from the driver
and from the recorder (``BrokenPipeError``, twice), and ended aborted by torch ("terminate
called without an active exception") or, with Ray killed by the signal, 60 s later with exit
code 1.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import benchmarks.ledger_study.lockstep as lockstep  # noqa: E402
import benchmarks.ledger_study.main as study  # noqa: E402
from simulator.run.stop import Terminated  # noqa: E402


def _arm(log: list[tuple[str, Any]], name: str, block: threading.Event | None = None) -> Any:
    """A run of 1,000 rounds of 5 ms that takes turns; ``block``: its round 2 waits on it (as
    a round waits on a Ray that the signal killed)."""

    def run(callbacks: list[Any]) -> dict[str, Any]:
        (cb,) = callbacks
        try:
            for r in range(1000):
                cb.on_plan(None, None)
                log.append((name, r))
                if block is not None and r == 2:
                    block.wait(60)  # bounded: a test that fails must not hang the suite
                time.sleep(0.005)
        except KeyboardInterrupt:
            log.append((name, "stopped"))
            raise
        return {"run_seconds": 1.0}

    return run


@pytest.fixture(autouse=True)
def _sigint_raises() -> Any:
    """Python's own SIGINT handler, also where the test run inherited SIGINT ignored (a
    background job of a shell without job control: a fresh clone's ``.ci/run`` started so)."""
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, handler)


def _interrupt_when(log: list[tuple[str, Any]], n: int) -> None:
    """Ctrl-C in the main thread once ``log`` holds ``n`` entries."""

    def watch() -> None:
        while len(log) < n:
            time.sleep(0.001)
        os.kill(os.getpid(), signal.SIGINT)  # a real signal: it interrupts a blocking wait

    threading.Thread(target=watch, daemon=True).start()


def _arm_threads() -> list[str]:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        names = [t.name for t in threading.enumerate() if t.name.startswith("arm-")]
        if not names:
            break
        time.sleep(0.01)
    return names


def test_a_stop_ends_every_arm_at_its_next_turn() -> None:
    log: list[tuple[str, Any]] = []
    jobs = {a: _arm(log, a) for a in ("plain", "ledger")}
    _interrupt_when(log, 6)
    with pytest.raises(KeyboardInterrupt):
        lockstep.run_interleaved(jobs, ["plain", "ledger"])
    assert {e for e in log if e[1] == "stopped"} == {("plain", "stopped"), ("ledger", "stopped")}
    assert max(r for _, r in log if r != "stopped") < 10  # not the 1,000 rounds
    assert lockstep.stuck_arms() == [] and _arm_threads() == []


def test_an_arm_that_never_comes_back_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lockstep, "STOP_GRACE_S", 0.3)
    log: list[tuple[str, Any]] = []
    ray_gone = threading.Event()
    jobs = {"plain": _arm(log, "plain"), "ledger": _arm(log, "ledger", block=ray_gone)}
    _interrupt_when(log, 6)  # ledger waits in its round 2 (the 6th entry) for ever
    try:
        with pytest.raises(KeyboardInterrupt):
            lockstep.run_interleaved(jobs, ["plain", "ledger"])
        assert lockstep.stuck_arms() == ["ledger"]
    finally:
        ray_gone.set()
    assert _arm_threads() == [] and lockstep.stuck_arms() == []  # it ended after all


def test_the_recorder_leaves_quietly_when_its_driver_is_gone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from ledger.host import _serve

    class Gone:
        """A driver's socket that delivers a ping and cannot take the answer."""

        def __init__(self) -> None:
            self.sent = False

        def recv(self) -> tuple[str]:
            if self.sent:
                raise EOFError
            self.sent = True
            return ("ping",)

        def send(self, msg: Any) -> None:
            raise BrokenPipeError(32, "Broken pipe")

    assert _serve(Gone()) is None  # type: ignore[arg-type]
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("stop", "code", "what"), [
    (KeyboardInterrupt, 130, "interrupted"), (Terminated, 143, "terminated (SIGTERM)"),
])  # fmt: skip
def test_a_stopped_study_ends_in_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    stop: type,
    code: int,
    what: str,
) -> None:
    def record(task: str, args: Any) -> None:
        raise stop()

    monkeypatch.setattr(study, "_start_recorder", lambda: 0.0)
    monkeypatch.setattr(study, "record", record)
    out = tmp_path / "s"
    assert study.main(["--quick", "--out", str(out), "--no-progress"]) == code
    assert capsys.readouterr().err == (
        f"{what}: the study stopped; the runs it made so far are under {out} (a study does not "
        "resume: run it again)\n"
    )
