"""The slots a round's rows travel through to the recorder: memory files on Linux, so that a
small ``/dev/shm`` (a Docker container's 64 MB) no longer ends a ``--ledger`` run with SIGBUS."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ledger.slots import MemSlot, Views

pytestmark = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="Linux memory files")
ROOT = Path(__file__).resolve().parent.parent


def test_a_memory_slot_is_read_where_the_recorder_maps_it_and_renamed_when_replaced() -> None:
    views = Views()
    a = MemSlot("fsrec-test", 1 << 16)
    np.ndarray((4, 3), "<f4", buffer=a.buf)[...] = np.arange(12, dtype=np.float32).reshape(4, 3)
    got = views.rows((0, a.name, 4, 3))
    assert got[3].tolist() == [9.0, 10.0, 11.0]
    fd = a.name.partition("#")[0]
    a.close()
    a.unlink()
    assert got[3].tolist() == [9.0, 10.0, 11.0]  # the recorder's mapping outlives the driver's
    del got
    b = MemSlot("fsrec-test", 1 << 16)  # the descriptor number is free again: reused
    try:
        assert b.name.partition("#")[0] == fd and b.name != a.name
        b.buf[:4] = np.float32(7).tobytes()
        assert views.rows((0, b.name, 1, 1))[0, 0] == 7.0  # a new name: mapped again
    finally:
        views.close()
        b.close()


def test_the_recorder_faults_a_memory_slots_pages_in_without_writing() -> None:
    size = 8 << 20
    slot = MemSlot("fsrec-test", size)
    try:
        slot.buf[:4] = b"rows"
        assert os.fstat(slot._fd).st_blocks * 512 == 4096  # noqa: SLF001 - one page so far
        views = Views()
        views.prefault([slot.name])
        assert os.fstat(slot._fd).st_blocks * 512 == size  # noqa: SLF001 - all 2,048
        assert bytes(slot.buf[:4]) == b"rows" and not any(slot.buf[4 : 1 << 16])
        views.close()
    finally:
        slot.close()


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="mounts a small /dev/shm"
)
def test_a_ledger_run_under_a_small_dev_shm_finishes_and_audits_clean(tmp_path: Path) -> None:
    """/dev/shm of 2 MB, rounds of 100 rows of the digits MLP (3.6 MB a slot): a POSIX segment
    there ended the run with SIGBUS; the memory files do not live there."""
    out = tmp_path / "run"
    py = sys.executable
    script = (
        "mount -t tmpfs -o size=2m tmpfs /dev/shm || exit 77; "
        f"{py} -m simulator --partition virtual --num-clients 1000 --clients-per-round 100 "
        f"--rounds 2 --backend local --ledger --committee 1 --no-progress --no-plots "
        f"--out {out} > /dev/null"
    )
    res = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], cwd=ROOT, capture_output=True, text=True
    )
    if res.returncode == 77:
        pytest.skip("cannot mount a tmpfs here")
    assert res.returncode == 0, res.stderr[-2000:]
    from ledger.audit import audit_run

    rep = audit_run(out)
    assert rep.clean and rep.rounds == 2, rep.text()


def test_a_slot_let_go_before_the_recorder_faults_it_in_is_skipped() -> None:
    """Slot 0 is gone (the driver closed it); slot 1 is still faulted in."""
    live = MemSlot("fsrec-test", 1 << 20)
    gone = MemSlot("fsrec-test", 1 << 16)  # made last: no slot takes its descriptor number
    gone.close()
    views = Views()
    try:
        views.prefault([gone.name, live.name])
        assert sorted(views.maps) == [1]
        assert os.fstat(live._fd).st_blocks * 512 == 1 << 20  # noqa: SLF001 - all 256 pages
    finally:
        views.close()
        live.close()


def test_a_failed_resume_leaves_no_message_for_the_next_run(tmp_path: Path) -> None:
    """A resume whose ledger is gone fails at "open"; the driver lets its slots go before the
    recorder reads the "prefault" that followed. Until stop 48 that prefault answered a second
    error, which the next run on the same recorder read as its own and failed with."""
    from ledger.host import RecorderHost
    from simulator.config.sections import build_config

    run = tmp_path / "run"
    cfg = build_config(flat={"dataset": "digits", "out": str(run), "ledger": True})
    host = RecorderHost()
    gone = MemSlot("fsrec-test", 1 << 16)
    gone.close()
    try:
        host.conn.send(("open", cfg.to_dict(), str(run), None, True))
        host.conn.send(("prefault", [gone.name]))
        host.conn.send(("ping",))
        first, second = host.conn.recv(), host.conn.recv()
    finally:
        host.stop()
    assert first[:3] == ("error", None, "start")
    assert first[3] == f"cannot resume: {run / 'ledger'} has no manifest.json, and the " + (
        "checkpoint is past round 0"
    ), first
    assert second[0] == "pong", second
