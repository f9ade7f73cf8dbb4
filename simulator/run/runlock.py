"""One run at a time in a run directory.

Two runs writing into the same ``--out`` (the default ``runs/latest`` makes it easy: two
terminals, one command) interleaved their rounds in one ``events.jsonl``, each truncating what
the other had written, and both ended with exit code 0. A run now holds an exclusive
``flock`` on ``OUT/.run.lock`` from before anything is written until it ends; a second run there
is refused in one line before it touches the directory. The kernel lets go of the lock when its
holder dies (a kill -9 included), so ``--resume`` right after a crash is never refused; the
descriptor is not inherited by the processes a run starts (Ray's, the ledger's recorder), which
are started with ``exec``.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path

from simulator.config.fields import ConfigError

#: the lock file in a run directory (it holds the pid of the run that took it last)
LOCK_FILE = ".run.lock"


def make_out_dir(out: Path, what: str = "output.out") -> None:
    """Create the output directory ``out`` (and its parents); :class:`ConfigError` in one line
    naming ``what`` when it cannot be (a file there, a read-only disk, no permission). A full
    disk stays an ``OSError`` (ENOSPC): the callers say how to go on from it."""
    from simulator.run.appendlog import is_disk_full

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if is_disk_full(exc):
            raise
        why = "a file is there" if isinstance(exc, FileExistsError) else exc.strerror
        raise ConfigError(f"{what}: cannot make the directory {out} ({why})") from None
    try:  # one that is there may still refuse files (a read-only disk)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        if is_disk_full(exc):
            raise
        raise ConfigError(f"{what}: cannot write in {out} ({exc.strerror})") from None


def writable_file(path: Path, what: str) -> None:
    """Check, before long work, that ``path`` can be written later: its directory is made
    (:func:`make_out_dir`), ``path`` is no directory and opens for appending (``/proc/x``
    does not; a file that was not there is removed again); :class:`ConfigError` naming
    ``what``."""
    make_out_dir(path.parent, what)
    if path.is_dir():
        raise ConfigError(f"{what}: {path} is a directory (a file name is expected)")
    existed = path.exists()
    try:
        with open(path, "a"):
            pass
    except OSError as exc:
        raise ConfigError(f"{what}: cannot write {path} ({exc.strerror})") from None
    if not existed:
        path.unlink()


def lock_run_dir(out: Path, what: str = "output.out") -> int:
    """Take the run directory ``out``'s lock (creating the directory) and return its file
    descriptor; close it to let go. ``what`` names the setting in the error (a study's
    ``--out``: two studies into one directory would write each other's results).

    Raises
    ------
    ConfigError
        One line naming the directory and the pid of the run that holds it, or why the
        directory cannot be made (:func:`make_out_dir`).
    """
    make_out_dir(out, what)
    fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise ConfigError(
            f"{what}: {out} is in use by another run (pid {holder}): choose another --out, "
            "or wait for that run to end"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
