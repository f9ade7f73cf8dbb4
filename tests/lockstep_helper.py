"""Running the ledger study's round-interleaved arms in a test without hanging it."""

from __future__ import annotations

import threading
from typing import Any

from benchmarks.ledger_study.lockstep import run_interleaved


def interleaved(jobs: dict[str, Any], order: list[str], clock: Any, **kw: Any) -> dict[str, Any]:
    """:func:`run_interleaved` in a thread, failing the test instead of hanging it."""
    box: dict[str, Any] = {}

    def go() -> None:
        try:
            box["out"] = run_interleaved(jobs, order, clock, **kw)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            box["err"] = exc

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "the arms deadlocked"
    if "err" in box:
        raise box["err"]
    return box["out"]
