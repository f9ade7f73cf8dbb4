"""How the recorder process (:mod:`ledger.host`) sets itself up: it dies with its driver, runs
at the lowest CPU priority or on the CPUs named for it (:func:`parse_cpus`), pays a session's
first-use costs early, and freezes its start-up heap out of the garbage collector's full
collections."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import time
from multiprocessing.connection import Connection
from typing import Any

from simulator.run import stop

_GC = {"seconds": 0.0, "full": 0, "started": 0.0}  # this process's collections since the freeze


def die_with_parent(parent: int) -> None:
    """Have the OS kill this process when ``parent`` (its driver) dies (SIGKILL by
    :func:`simulator.run.stop.die_with_parent`; elsewhere it exits when its socket closes)."""
    stop.die_with_parent(parent, signal.SIGKILL)


def warm_up() -> None:
    """Pay a session's first-use costs now: a throwaway deployment on a throwaway devnet builds
    web3's contract wrappers and py-evm's VM classes (~0.15 s of CPU that the first run's
    rounds would otherwise share their cores with)."""
    from ledger.chain import Chain
    from ledger.session_start import committee_of

    committee = committee_of(1)
    Chain.embedded("flchain-warm-up", 1).deploy(
        bytes(32), committee.pubkeys_eip2537(), committee.quorum, False
    )


def lowest_priority() -> None:
    """Put this process at the lowest CPU priority the OS has.

    Recording should use the cycles training leaves idle; the bound of two rounds (the driver
    waits beyond it, and lends its CPUs for the rounds it waits for) keeps it from falling
    further behind. Linux's ``SCHED_IDLE`` runs the process only where no other is runnable,
    and a waking training thread takes the CPU from it at once; nice 19 (the fallback, and set
    first) still shares a CPU for a time slice. Measured on 2 shared cores, rounds in turn, in
    four pairs of runs alternating the two (stop 45), the 1,000-client task read +35.1%,
    +35.5%, +44.7% and +41.3% at ``SCHED_IDLE`` against +46.9%, +39.4%, +36.5% and +44.5% at
    nice 19: better in three pairs of four, by less than this machine's drift; the recorder
    lags 2 rounds (the bound) instead of 1. The robustness task read the same (+3.4%, +4.2%
    against +4.4%, +2.7%)."""
    os.nice(19)
    if hasattr(os, "SCHED_IDLE"):
        with contextlib.suppress(OSError):  # a kernel or a sandbox without it: nice 19
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def freeze_heap() -> None:
    """Move every object alive now (torch, py-evm, web3, the compiled contract: the recorder's
    imports and warm-up) out of the garbage collector's reach, and start counting the CPU time
    of the collections that follow (:func:`heap_stats`).

    A full (generation 2) collection scans every tracked object, and the recorder's start-up
    heap is large: measured with ``gc.callbacks`` on a 10-round run of 1,000 virtual clients a
    round (stop 47), its one full collection took 0.154 s of the recorder's 1.41 s of CPU, and
    0.001 s once that heap was frozen (all collections: 0.172 s against 0.020 s). Objects
    frozen are never freed; a session's own objects are made after this and stay collectable.
    """
    gc.collect()
    gc.freeze()
    if _clock not in gc.callbacks:
        gc.callbacks.append(_clock)


def heap_stats() -> dict[str, float]:
    """Objects frozen by :func:`freeze_heap`, full collections since, and the CPU seconds of
    all collections since."""
    return {
        "frozen": gc.get_freeze_count(),
        "full_collections": _GC["full"],
        "gc_cpu_seconds": _GC["seconds"],
    }


def _clock(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _GC["started"] = time.process_time()
        return
    _GC["seconds"] += time.process_time() - _GC["started"]
    _GC["full"] += info["generation"] == 2


class DriverGone(BaseException):
    """The driver closed its end of the recorder's socket (it died or stopped): there is
    nobody to answer. A ``BaseException``: the recorder's ``except Exception``, which sends
    every failure back to the driver, lets it through (a driver stopped mid-round left a
    ``BrokenPipeError`` traceback from there, twice)."""


def answer(conn: Connection, msg: tuple[Any, ...]) -> None:
    """Send ``msg`` to the driver; :class:`DriverGone` when it is gone."""
    try:
        conn.send(msg)
    except (BrokenPipeError, ConnectionResetError) as exc:
        raise DriverGone from exc


def parse_cpus(text: str) -> set[int]:
    """``"1"``, ``"0,2"``, ``"2-5"`` (and mixes) -> a set of CPU numbers.

    Raises
    ------
    ValueError
        One line naming the bad part, or a CPU this machine does not have.
    """
    cpus: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, dash, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi) if dash else int(lo)
        except ValueError:
            raise ValueError(f"CPU list {text!r}: {part!r} is not N or N-M") from None
        if a < 0 or b < a:
            raise ValueError(f"CPU list {text!r}: {part!r} is not a CPU range")
        cpus.update(range(a, b + 1))
    if not cpus:
        raise ValueError(f"CPU list {text!r} names no CPU")
    n = os.cpu_count() or 1
    bad = sorted(c for c in cpus if c >= n)
    if bad:
        raise ValueError(f"CPU list {text!r}: CPU {bad[0]} does not exist (this machine has {n})")
    return cpus
