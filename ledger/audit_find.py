"""Which run directories an audit is given: each path named holds a run, or runs below it
(searched recursively but for hidden directories, e.g. the tamper study's ``.tamper``)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ledger.audit_input import AuditInputError
from simulator.run.runlock import LOCK_FILE

__all__ = ["find_runs"]


def find_runs(paths: list[str]) -> list[Path]:
    """Run directories under ``paths`` (a run dir itself, or any directory holding runs,
    searched recursively but for hidden directories, e.g. the tamper study's ``.tamper``);
    :class:`AuditInputError` for a path that holds none, or a run just started (no manifest
    yet)."""
    runs: list[Path] = []
    for p in map(Path, paths):  # each path named must hold a run: a mistyped one is no pass
        if not p.exists():
            raise AuditInputError(f"{p}: no such directory")
        found = (
            [p]
            if (p / "ledger" / "manifest.json").is_file()
            else sorted(
                m.parent.parent
                for m in p.rglob("ledger/manifest.json")
                if not any(part.startswith(".") for part in m.relative_to(p).parts)
            )
        )
        if not found and _locked(p / LOCK_FILE):
            raise AuditInputError(
                f"{p}: the run is still being written (it holds .run.lock and has no "
                "ledger/manifest.json yet): audit it once the run has ended"
            )
        if not found:
            raise AuditInputError(
                f"{p}: no recorded run found (no ledger/manifest.json; was the run made "
                "with --ledger?)"
            )
        runs += found
    return runs


def _locked(path: Path) -> bool:
    """Whether a process holds the ``flock`` of ``path`` now (read-only: a shared lock, let go
    at once)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # no lock file: nobody took it
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
