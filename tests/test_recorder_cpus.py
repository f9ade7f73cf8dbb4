"""Pinning the ledger's recorder process (``FEDSENTRY_RECORDER_CPUS``) and the CPU lists of
``benchmarks/ledger_audit.py --recorder-cpus/--driver-cpus``."""

from __future__ import annotations

import os

import pytest

from ledger.host import CPUS_ENV, RecorderHost
from ledger.host_process import parse_cpus


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0", {0}), ("0,1", {0, 1}), ("0-1", {0, 1}), (" 1 , 0-0 ", {0, 1}), ("1,1", {1})],
)
def test_parse_cpus(text: str, cpus: set[int]) -> None:
    if max(cpus) >= (os.cpu_count() or 1):
        pytest.skip("needs 2 CPUs")
    assert parse_cpus(text) == cpus


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x", "'x' is not N or N-M"),
        ("1-0", "'1-0' is not a CPU range"),
        ("-1", "'-1' is not N or N-M"),
        (",", "names no CPU"),
        ("4096", "CPU 4096 does not exist"),
    ],
)
def test_parse_cpus_rejects(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_cpus(text)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux affinity")
def test_recorder_process_is_pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CPUS_ENV, "0")
    host = RecorderHost()
    try:
        assert os.sched_getaffinity(host.proc.pid) == {0}
    finally:
        host.stop()
    monkeypatch.setenv(CPUS_ENV, "4096")
    with pytest.raises(ValueError, match=f"{CPUS_ENV}: CPU list '4096'"):
        RecorderHost()


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="Linux scheduling policies")
def test_recorder_process_runs_at_the_lowest_priority() -> None:
    """The recorder takes only the cycles training leaves idle: SCHED_IDLE (nice 19 set first,
    the fallback where the policy is refused)."""
    host = RecorderHost()
    try:
        host.wait_ready()
        assert os.sched_getscheduler(host.proc.pid) == os.SCHED_IDLE
        assert os.getpriority(os.PRIO_PROCESS, host.proc.pid) == 19
    finally:
        host.stop()


def test_the_recorder_freezes_its_start_up_heap() -> None:
    """Its imports and warm-up (~340,000 objects) are out of the garbage collector's full
    collections, one of which cost ~0.15 s of a 10-round 1,000-client run's ~1.4 s of recorder
    CPU while they were in (:func:`ledger.host_process.freeze_heap`)."""
    host = RecorderHost()
    try:
        stats = host.wait_ready()
        assert stats["frozen"] > 100_000 and stats["full_collections"] == 0
    finally:
        host.stop()


def test_ledger_audit_cli_rejects_bad_cpus(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.ledger_study.cli import parse_args

    with pytest.raises(SystemExit) as e:
        parse_args(["--driver-cpus", "a-b"])
    assert e.value.code == 2
    assert "--driver-cpus: CPU list 'a-b'" in capsys.readouterr().err
    args = parse_args(["--driver-cpus", "0", "--recorder-cpus", "0"])
    assert args.driver_cpus_set == {0} and args.recorder_cpus_set == {0}
