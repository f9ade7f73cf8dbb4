"""The driver's side of the recorder (ledger/recorder.py) against a scripted recorder process:
the two-round bound, errors surfacing when the driver next waits, the flush before a checkpoint."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from defenses import UpdateBatch
from ledger import recorder as rec_mod
from ledger.errors import LedgerRoundError


class ScriptedConn:
    """Answers each ``recv`` with the next ack; remembers what the recorder had acked when each
    round was sent. ``fail_at``: answer that round with an error instead."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.sent: list[tuple[int, int]] = []  # (round sent, acks delivered before)
        self.acks = 0
        self.fail_at = fail_at

    def send(self, msg: tuple) -> None:
        if msg[0] == "round":
            self.sent.append((msg[1]["round"], self.acks - 1))

    def poll(self) -> bool:
        return False

    def recv(self) -> tuple:
        r = self.acks
        self.acks += 1
        if r == self.fail_at:
            return ("error", r, "round", f"round {r}: the chain rejected the commitment", None)
        return ("done", r, {"gas": 1})


def _recorder(monkeypatch: pytest.MonkeyPatch, conn: ScriptedConn) -> rec_mod.LedgerRecorder:
    host = SimpleNamespace(
        conn=conn, busy=False, proc=SimpleNamespace(pid=1), exit_reason=lambda: "exited"
    )
    monkeypatch.setattr(rec_mod.RecorderHost, "get", classmethod(lambda cls: host))
    cfg = SimpleNamespace(
        defense=SimpleNamespace(defense="fedavg", defense_params={}),
        output=SimpleNamespace(resume=None, checkpoint_every=0),
        experiment=SimpleNamespace(rounds=100),
    )
    r = rec_mod.LedgerRecorder(cfg, "/nonexistent")
    r.acked = r.sent = -1
    return r


def _round(rnd: int) -> tuple[SimpleNamespace, SimpleNamespace]:
    batch = UpdateBatch(
        torch.ones(2, 3),
        np.array([1, 2]),
        np.array([5, 5]),
        np.array([rnd, rnd]),
        {"loss": np.zeros(2, np.float32), "alarm": np.zeros(2, bool)},
    )
    record = SimpleNamespace(
        round=rnd, rows=batch, verdicts=[{"client": 1, "kept": True}], to_event=dict
    )
    return SimpleNamespace(global_flat=torch.zeros(3)), record


def test_never_more_than_two_rounds_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = ScriptedConn()
    r = _recorder(monkeypatch, conn)
    for rnd in range(8):
        r.on_round_end(*_round(rnd))
    # round r is handed over only once round r - 3 is recorded (rounds r-2, r-1 may be pending)
    assert [acked for _, acked in conn.sent] == [-1, -1, -1, 0, 1, 2, 3, 4]
    assert r.lag_max == 2
    r.flush(5)  # before a checkpoint after round 5: rounds 0-5 are on the ledger
    assert r.acked == 5
    r._closed = True  # noqa: SLF001 - nothing to close on a scripted recorder
    r.close()


def test_an_error_surfaces_when_the_driver_next_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    r = _recorder(monkeypatch, ScriptedConn(fail_at=1))
    for rnd in range(4):
        r.on_round_end(*_round(rnd))
    with pytest.raises(LedgerRoundError, match="round 1: the chain rejected"):
        r.on_round_end(*_round(4))  # needs round 1 recorded: reads its error
    assert r.closed
    r.close()
    r2 = _recorder(monkeypatch, ScriptedConn(fail_at=0))
    r2.on_round_end(*_round(0))
    with pytest.raises(LedgerRoundError, match="round 0"):
        r2.flush()  # or at the flush before a checkpoint / at the end


def test_the_recorder_faults_a_new_slots_pages_in_without_writing() -> None:
    """``prefault``: every page of the driver's new slot allocated (tmpfs blocks), by the
    recorder's side, and the bytes the driver already wrote left as they were."""
    from multiprocessing import shared_memory
    from pathlib import Path

    from ledger.slots import Views

    size = 8 << 20
    shm = shared_memory.SharedMemory(create=True, size=size)
    try:
        path = Path("/dev/shm") / shm.name
        if not path.exists():
            pytest.skip("no /dev/shm")
        shm.buf[:4] = b"rows"  # the driver got there first: one page
        assert path.stat().st_blocks * 512 == 4096
        views = Views()
        views.prefault([shm.name])
        assert path.stat().st_blocks * 512 == size  # 2,048 pages of 4 KB, all there
        assert bytes(shm.buf[:4]) == b"rows" and not any(shm.buf[4 : 1 << 16])
        views.close()
    finally:
        shm.close()
        shm.unlink()


def test_slots_for_a_full_round_are_made_at_start_when_rounds_are_big(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """1,000 rows of 1,200 floats (4.8 MB) a round: three slots of that size at start, their
    names sent to the recorder, and the rounds' rows copied into them (no new slot); 100 rows
    (0.48 MB): nothing ahead."""
    for clients, want in ((1000, True), (100, False)):
        sent: list[tuple] = []
        conn = SimpleNamespace(send=sent.append, poll=lambda: False)
        r = _recorder(monkeypatch, conn)  # type: ignore[arg-type]
        r.cfg.experiment = SimpleNamespace(clients_per_round=clients)
        sim = SimpleNamespace(global_flat_shared=torch.zeros(1200))
        r._prefault(sim)  # noqa: SLF001
        try:
            names = [m[1] for m in sent if m[0] == "prefault"]
            if not want:
                assert names == [] and r._slots == [None] * 3  # noqa: SLF001
                continue
            assert names == [[s.name for s in r._slots]]  # noqa: SLF001
            assert [s.size for s in r._slots] == [1000 * 1200 * 4] * 3  # noqa: SLF001
            rows = np.arange(900 * 1200, dtype=np.float32).reshape(900, 1200)
            for i in range(3):
                slot = r._put(i, rows)  # noqa: SLF001
                assert slot == (i, names[0][i], 900, 1200)
            got = np.ndarray((900, 1200), "<f4", buffer=r._slots[2].buf)  # noqa: SLF001
            assert got[899, 1199] == 900 * 1200 - 1
            del got
        finally:
            for s in r._slots:  # noqa: SLF001
                if s is not None:
                    s.close()
                    s.unlink()


def test_a_rounds_clients_are_named_to_the_recorder_when_it_is_planned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``on_plan`` sends the clients that train this round (arriving now or later), sorted, so
    the recorder derives their keys while they train; none when nobody trains."""
    sent: list[tuple] = []
    r = _recorder(monkeypatch, SimpleNamespace(send=sent.append))  # type: ignore[arg-type]
    r.on_plan(None, SimpleNamespace(now={9, 2, 5}, hold={7}))
    r.on_plan(None, SimpleNamespace(now=set(), hold=set()))
    assert [(m[0], m[1].tolist()) for m in sent] == [("keys", [2, 5, 7, 9])]


def test_the_recorder_entry_point_refuses_a_user_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from ledger.host import main

    for argv in ([], ["x", "y"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        assert capsys.readouterr().err.strip().endswith("(not a user command)")


def test_the_driver_lends_its_cpus_for_the_rounds_it_waits_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The run's last round and each checkpoint's round carry the driver's CPUs (it waits for
    them right after handing them over); other rounds carry none."""
    sent: list[tuple] = []
    r = _recorder(monkeypatch, SimpleNamespace(send=sent.append))  # type: ignore[arg-type]
    monkeypatch.setattr(rec_mod.os, "sched_getaffinity", lambda pid: {3, 0}, raising=False)
    r.cfg.experiment = SimpleNamespace(rounds=10)
    r.cfg.output.checkpoint_every = 0
    assert [r._lend(k) for k in (0, 8, 9)] == [None, None, [0, 3]]  # noqa: SLF001
    r.cfg.output.checkpoint_every = 4
    lent = [k for k in range(10) if r._lend(k)]  # noqa: SLF001
    assert lent == [3, 7, 9]
