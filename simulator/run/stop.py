"""Stopping a run or a study cleanly: SIGTERM (a batch system's time limit, ``timeout``,
``docker stop``) is raised in the main thread as Ctrl-C's KeyboardInterrupt is, so a command
stops the way an interrupted one does (``finally`` blocks run: the ledger records what was
handed over, Ray shuts down) and ends in one line with exit code 143 (130 for Ctrl-C). A study
(a grid of runs) stopped by a signal or a full disk keeps every finished run and says how to go
on (:func:`study_stopped`).
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised by :func:`sigterm_raises`'s handler."""


class DiskFull(Exception):
    """A run of a study found its disk full (raised where the run's own error cannot travel
    as itself, e.g. from a Ray actor): the study stops, every finished run kept."""

    def __init__(self, path: str) -> None:
        super().__init__(f"no space left on the disk of {path}")
        self.path = path


def die_with_parent(parent: int, sig: int = signal.SIGTERM) -> None:
    """Have the OS send this process ``sig`` when ``parent`` dies (``PR_SET_PDEATHSIG`` on
    Linux), and exit now if it is already gone: a worker or helper process whose driver was
    killed with ``kill -9`` must not run on (and write into a study's directory) for good.
    Elsewhere only the check is made."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, sig)  # 1: PR_SET_PDEATHSIG
        except OSError:
            pass
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(128 + sig)


_SEEN: list[int] = []  # SIGTERMs the handler took: Ray's blocking calls turn what it raises
# into a plain KeyboardInterrupt


def _terminated(signum: int, frame: Any) -> None:
    _SEEN.append(signum)
    raise Terminated


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """Inside, SIGTERM raises :class:`Terminated` (in the main thread; elsewhere nothing
    changes), and so does any error raised after a SIGTERM came (Ray's own processes, in the
    same process group, may die of it first: the run then fails on a dead actor).
    :func:`actors.ray_setup.ensure_ray` keeps the handler across ``ray.init``, which would put
    Ray's own in its place (it printed a core-worker stack dump)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _SEEN.clear()
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - re-raised, as itself or as the stop it follows
        if _SEEN:  # a SIGTERM to the process group also ends Ray's processes: the error that
            raise Terminated(f"after SIGTERM: {exc}") from exc  # follows is the stop's
        raise
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def terminated(e: KeyboardInterrupt) -> bool:
    """Whether ``e`` stopped a command because of SIGTERM (not Ctrl-C)."""
    return isinstance(e, Terminated) or bool(_SEEN)


def stopped(e: KeyboardInterrupt) -> tuple[str, int]:
    """How a stopped command names its stop, and its exit code."""
    return ("terminated (SIGTERM)", 143) if terminated(e) else ("interrupted", 130)


def go_on(script: str, argv: list[str] | None) -> str:
    """The command that goes on with a stopped study ``script``: its arguments (``argv``, or
    this process's) and ``--resume``."""
    again = sys.argv[1:] if argv is None else list(argv)
    return f"python {script} {shlex.join([*again, *([] if '--resume' in again else ['--resume'])])}"


def study_stopped(
    e: BaseException, script: str, argv: list[str] | None, kept: str
) -> tuple[str, int] | None:
    """The one line and the exit code a study ``script`` ends with when ``e`` stopped it
    (Ctrl-C: 130, SIGTERM: 143, a full disk: 1), saying what is ``kept`` (e.g. "3 of 8 runs
    finished under OUT") and how to go on (:func:`go_on`); None when ``e`` is no stop."""
    from simulator.run.appendlog import is_disk_full

    if isinstance(e, KeyboardInterrupt):
        what, code = stopped(e)
        return f"{what}: {kept}; go on with: {go_on(script, argv)}", code
    if isinstance(e, DiskFull) or is_disk_full(e):
        path = e.path if isinstance(e, DiskFull) else getattr(e, "filename", None) or "the output"
        return (
            f"error: no space left on the disk of {path}; {kept}: free some space, then go on "
            f"with: {go_on(script, argv)}",
            1,
        )
    return None


def report_stop(e: BaseException, script: str, argv: list[str] | None, kept: str) -> int:
    """Print :func:`study_stopped`'s line for ``e`` and return its exit code; ``e`` is raised
    again when it is no stop."""
    stop = study_stopped(e, script, argv, kept)
    if stop is None:
        raise e
    print(stop[0], file=sys.stderr)
    return stop[1]
