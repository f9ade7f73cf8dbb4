"""The recorder process: FLChain recording off the training path (ledger v2).

Recording a round (committee replay, client signatures, hashing every row, the pack, the EVM
transaction) holds the GIL, so it runs in its own process, not a thread. One recorder process
serves a driver process (started on first use, like a local Ray, and reused by the runs that
follow, so its imports are paid once); each run opens a :class:`ledger.session.Session` on it.

The driver hands each round's rows over through shared memory (the ``[n, P]`` update matrix is
copied once into one of three slots; the recorder hashes and writes it from there) and its
per-row fields and verdicts through a socket. The recorder answers ``("done", round, stats)`` or
``("error", round, kind, message, full)`` (``kind``: ``"start"``, ``"round"``, or ``"lost"`` when
the node lost the run's chain; ``full``: the file a full disk refused, else None);
the driver (:mod:`ledger.recorder`) never lets it fall more than two rounds behind and waits for
it before each checkpoint and at the end of the run.

The recorder dies with its driver (``PR_SET_PDEATHSIG`` on Linux; elsewhere it exits when the
socket closes) and ignores SIGINT and SIGTERM (a Ctrl-C in the terminal, or a batch system's
SIGTERM to every process of a job, stops the driver, which then closes the session), so a
killed run never leaves a recorder writing behind a resumed one (the session also holds an
``flock`` on its ledger directory).

Run as ``python -m ledger.host FD`` by :class:`RecorderHost`; not a user command.
"""

from __future__ import annotations

import atexit
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import traceback
from multiprocessing.connection import Connection
from pathlib import Path

from ledger.host_process import (
    DriverGone,
    answer,
    die_with_parent,
    freeze_heap,
    heap_stats,
    lowest_priority,
    parse_cpus,
    warm_up,
)
from ledger.slots import Views

SLOTS = 3  # rounds the recorder may hold: the one it works on and two queued
#: environment variable naming the CPUs the recorder process is pinned to (``1``, ``2,3``,
#: ``2-5``); unset: wherever the OS puts it, at the lowest priority (:func:`lowest_priority`).
#: Pin it to a core training does not use (and the driver off it) when one is to spare.
CPUS_ENV = "FEDSENTRY_RECORDER_CPUS"


class RecorderHost:
    """The driver's handle on its recorder process (one per driver process)."""

    _current: RecorderHost | None = None

    def __init__(self) -> None:
        parent, child = socket.socketpair()
        root = str(Path(__file__).resolve().parent.parent)
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])]),
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ledger.host", str(child.fileno()), str(os.getpid())],
            pass_fds=(child.fileno(),),
            env=env,
        )
        child.close()
        cpus = os.environ.get(CPUS_ENV)
        if cpus and hasattr(os, "sched_setaffinity"):
            try:
                os.sched_setaffinity(self.proc.pid, parse_cpus(cpus))
            except ValueError as exc:
                self.proc.kill()
                raise ValueError(f"{CPUS_ENV}: {exc}") from None
        self.conn = Connection(parent.detach())
        self.busy = False  # a session is open on it
        self.owner = os.getpid()

    @classmethod
    def get(cls) -> RecorderHost:
        """This process's recorder, started if there is none (or it died)."""
        h = cls._current
        if h is not None and h.owner != os.getpid():  # a forked child: the parent's, not ours
            h = cls._current = None
        if h is None or h.proc.poll() is not None or h.busy:
            if h is not None and h.busy and h.proc.poll() is None:
                h.stop()  # a session left open by an interrupted run: start afresh
            h = cls._current = cls()
        return h

    @classmethod
    def running_pid(cls) -> int | None:
        """The process id of this process's recorder while it runs, else ``None``."""
        h = cls._current
        if h is None or h.owner != os.getpid() or h.proc.poll() is not None:
            return None
        return h.proc.pid

    def stop(self) -> None:
        """Close the socket (the recorder exits) and wait for it."""
        try:
            self.conn.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        if RecorderHost._current is self:
            RecorderHost._current = None

    def wait_ready(self) -> dict[str, float]:
        """Block until the recorder has loaded everything (it answers a ping then); returns
        its garbage collector's figures (:func:`ledger.host_process.heap_stats`)."""
        self.conn.send(("ping",))
        msg = self.conn.recv()
        if msg[0] != "pong":
            raise RuntimeError(f"the ledger recorder answered {msg[0]!r} to a ping")
        return msg[1]

    def exit_reason(self) -> str:
        """How the recorder ended (its socket closed: it is exiting or gone)."""
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        return "is still running" if code is None else f"exited with code {code}"


@atexit.register
def _stop_host() -> None:
    if RecorderHost._current is not None:
        RecorderHost._current.stop()


def prestart() -> RecorderHost:
    """Start this process's recorder now (a benchmark's timings then exclude its start)."""
    return RecorderHost.get()


# -- the recorder process ----------------------------------------------------------------------
def _drain(conn: Connection) -> queue.SimpleQueue:
    """Messages from the driver, read as they come by a thread of their own (``None`` once the
    socket closes).

    The driver's hand-overs must never wait on the socket: a round's message is ~112 KB at
    1,000 clients and a socket holds ~208 KB, so while the recorder worked on one round a
    second queued one filled it and the driver's send blocked until the round was done
    (100-1,000 ms hand-overs at stop 48, in the rounds after a slow start). Read here, the
    messages wait in this process instead; the driver still bounds how many (:data:`SLOTS`)."""
    inbox: queue.SimpleQueue = queue.SimpleQueue()

    def read() -> None:
        while True:
            try:
                inbox.put(conn.recv())
            except (EOFError, OSError):
                inbox.put(None)
                return

    threading.Thread(target=read, name="ledger-inbox", daemon=True).start()
    return inbox


def _serve(conn: Connection) -> None:
    """Answer the driver until it closes the socket or is gone (then quietly: no traceback)."""
    try:
        _serve_until_closed(conn)
    except DriverGone:
        return


def _serve_until_closed(conn: Connection) -> None:
    from ledger.audit_input import AuditInputError
    from ledger.errors import LedgerChainLost, LedgerError, LedgerRoundError
    from ledger.round_build import RoundRows
    from ledger.session import Session
    from ledger.spans import lent
    from simulator.config.sections import build_config
    from simulator.run.appendlog import CorruptLogError, is_disk_full

    quiet = (LedgerError, LedgerRoundError, AuditInputError, CorruptLogError)  # one line, no trace

    def lost(exc: Exception) -> bool:
        return isinstance(exc, LedgerChainLost)

    views, session, failed, run_dir = Views(), None, False, "the run's ledger"
    inbox = _drain(conn)
    while True:
        msg = inbox.get()
        if msg is None:  # the driver closed the socket (or died)
            return
        kind = msg[0]
        try:
            if kind == "open":
                _, cfg_dict, run_dir, initial, resume = msg
                views.close()  # the last run's slots are gone
                session, failed = Session(build_config(cfg_dict), run_dir), False
                answer(conn, ("ready", session.open(initial, resume)))
            elif kind == "round" and session is not None and not failed:
                _, meta, slot, lend = msg
                data = RoundRows(rows=views.rows(slot), **meta)
                with lent(lend):  # the driver waits for this round: its CPUs are free
                    answer(conn, ("done", meta["round"], session.record(data)))
            elif kind == "keys":
                if session is not None and not failed:
                    session.keys.prefetch(msg[1])
            elif kind == "prefault":  # a head start: a slot the driver let go is skipped
                views.prefault(msg[1])
            elif kind == "ping":
                answer(conn, ("pong", heap_stats()))
            elif kind == "close":
                out = session.close() if session is not None else {}
                session = None
                answer(conn, ("closed", out))
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the driver
            rnd = msg[1]["round"] if kind == "round" else None
            full = (getattr(exc, "filename", None) or run_dir) if is_disk_full(exc) else None
            if isinstance(exc, quiet) or full:
                text = str(exc).splitlines()[0]
            else:
                traceback.print_exc(file=sys.stderr)
                text = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            failed = True
            if session is not None:  # let go of its files and lock now: the run may resume
                try:
                    session.close()
                except Exception:  # noqa: BLE001 - closing a broken session is best effort
                    pass
                session = None
            where = "start" if kind != "round" else "lost" if lost(exc) else "round"
            answer(conn, ("error", rnd, where, text, full))


def main(argv: list[str]) -> None:
    try:
        fd, parent = int(argv[0]), int(argv[1])
    except (IndexError, ValueError):
        print(
            "ledger.host: the ledger's recorder process, started by a --ledger run "
            "(not a user command)",
            file=sys.stderr,
        )
        raise SystemExit(2) from None
    die_with_parent(parent)
    for sig in (signal.SIGINT, signal.SIGTERM):  # the driver stops, then closes the session
        signal.signal(sig, signal.SIG_IGN)
    lowest_priority()
    import torch

    torch.set_num_threads(1)
    # everything a session needs, loaded before the first run asks (its start is then hidden
    # behind the driver's own start-up)
    import sklearn.datasets  # noqa: F401 - the committee's replay loads the run's data (~1 s)

    import ledger.pyevm  # noqa: F401
    import ledger.replay  # noqa: F401
    import ledger.session  # noqa: F401
    import simulator.round.server  # noqa: F401 - the committee's replay builds a server side
    import simulator.run.federation  # noqa: F401
    from ledger.compile import compile_flchain

    compile_flchain()
    warm_up()
    freeze_heap()
    conn = Connection(fd)
    try:
        _serve(conn)
    finally:
        conn.close()


if __name__ == "__main__":
    main(sys.argv[1:])
