"""The recorder reads the driver's messages while it records a round: a hand-over never waits
on the socket between the two processes.

A 1,000-client round's message is ~112 KB and the socket holds ~208 KB. Until stop 48 the
recorder read its next message only once it had recorded the round in hand, so a second round
queued behind it filled the socket and the driver's send blocked for the rest of that round
(100-1,000 ms hand-overs, measured in the rounds after a slow start).
"""

from __future__ import annotations

import socket
import threading
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import pytest

from ledger import host


class BlockedSession:
    """A session whose ``record`` waits until the test lets it go."""

    started = threading.Event()
    release = threading.Event()

    def __init__(self, cfg: Any, run_dir: str) -> None:
        self.keys = self

    def prefetch(self, ids: Any) -> None:
        pass

    def open(self, initial: Any, resume: bool) -> dict[str, Any]:
        return {"rounds": 0}

    def record(self, data: Any) -> dict[str, Any]:
        self.started.set()
        assert self.release.wait(60)
        return {"round": data.round}

    def close(self) -> dict[str, Any]:
        return {}


def _round(rnd: int) -> tuple:
    meta = {
        "round": rnd,
        "client_ids": np.arange(4),
        "num_samples": np.ones(4, np.int64),
        "base_rounds": np.zeros(4, np.int64),
        "loss": np.zeros(4, np.float32),
        "alarm": np.zeros(4, bool),
        "global_flat": np.zeros(3, np.float32),
        "verdicts": {},
    }
    return ("round", meta, None, None)


def test_the_driver_sends_while_the_recorder_records_a_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("ledger.session.Session", BlockedSession)
    monkeypatch.setattr("simulator.config.sections.build_config", lambda cfg: cfg)
    a, b = socket.socketpair()
    driver, recorder = Connection(a.detach()), Connection(b.detach())
    serve = threading.Thread(target=host._serve, args=(recorder,), daemon=True)
    serve.start()
    driver.send(("open", {}, "/nonexistent", None, False))
    assert driver.recv() == ("ready", {"rounds": 0})
    driver.send(_round(0))
    assert BlockedSession.started.wait(30)  # the recorder is inside round 0 now

    # 2 MB of hand-overs (ten times what the socket holds) while round 0 is being recorded
    big = ("keys", np.arange(25_000, dtype=np.int64))  # 200 KB each
    sent = threading.Event()

    def send_all() -> None:
        for _ in range(10):
            driver.send(big)
        driver.send(_round(1))
        sent.set()

    sender = threading.Thread(target=send_all, daemon=True)
    sender.start()
    done_sending = sent.wait(20)
    BlockedSession.release.set()  # round 0 may end now
    assert done_sending, "the driver's sends waited for the recorder to finish its round"
    assert driver.recv() == ("done", 0, {"round": 0})
    assert driver.recv() == ("done", 1, {"round": 1})
    driver.close()  # the recorder's reader sees the socket close; _serve returns
    serve.join(30)
    assert not serve.is_alive()
