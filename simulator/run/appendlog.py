"""Append-only run files that survive a kill -9 at any moment, even mid-write.

Every append-only file of a run (``events.jsonl``, the ledger's ``rounds.jsonl``, the devnet
export ``blocks.rlp``) is a sequence of records, each written by one :meth:`AppendLog.append`
(unbuffered writes of the whole record).  A process killed during that write leaves at most one
*torn* record, and only at the end of the file: :func:`drop_torn_tail` cuts it off in place before
a resumed run appends again, and :func:`read_jsonl` skips it.  Anything wrong before the tail is
corruption and raises :class:`CorruptLogError`; it is never silently dropped.  A write that fails
(a full disk) cuts the file back to its last whole record and raises ``OSError`` naming the
file, so the run stops with its files whole and ``--resume`` goes on once there is room.

Two kinds of record:

``"jsonl"``
    one JSON object per line, ending in ``b"\\n"``; a last line without its newline is torn.
``"records"``
    ``uint32 big-endian length || payload``; a last record shorter than it announces is torn.

Fault injection
---------------
``FEDSENTRY_FAILPOINT`` is the project's one fault-injection point, read once per process at
the first append.  ``"NAME:N"``: the N-th append (1-based, counted per process) to a file whose
basename is NAME writes the first half of its bytes, flushes, fsyncs and SIGKILLs its own
process; ``"NAME:N:after"`` writes the whole record, flushes, then SIGKILLs;
``"NAME:N:enospc"`` writes the first half and fails as a full disk does (``OSError`` ENOSPC).
Tests set it in a subprocess's environment to kill a real run at an exact point.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

__all__ = [
    "KINDS",
    "AppendLog",
    "CorruptLogError",
    "Failpoint",
    "drop_torn_tail",
    "is_disk_full",
    "parse_failpoint",
    "read_jsonl",
]

#: the record formats an append-only file may hold
KINDS = ("jsonl", "records")
FAILPOINT_ENV = "FEDSENTRY_FAILPOINT"
_LEN = 4  # bytes of a "records" length prefix


class CorruptLogError(ValueError):
    """A record before the tail of an append-only file is damaged (not a torn write)."""


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"append log kind {kind!r}: expected one of {', '.join(KINDS)}")


# ------------------------------------------------------------------------------ failpoint


@dataclass(frozen=True)
class Failpoint:
    """Kill the process at the ``n``-th append to a file named ``name`` (``after``: once the
    record is whole; otherwise halfway through it); ``enospc``: fail halfway through it as a
    full disk does, instead of killing."""

    name: str
    n: int
    after: bool = False
    enospc: bool = False


def parse_failpoint(spec: str | None) -> Failpoint | None:
    """The failpoint of a ``FEDSENTRY_FAILPOINT`` value (None when unset or empty).

    Raises
    ------
    ValueError
        One line naming the variable when ``spec`` is not ``NAME:N``, ``NAME:N:after`` or
        ``NAME:N:enospc``.
    """
    if not spec:
        return None
    m = re.fullmatch(r"([^:]+):([1-9][0-9]*)(:after|:enospc)?", spec)
    if m is None:
        raise ValueError(
            f"{FAILPOINT_ENV}={spec!r}: expected NAME:N, NAME:N:after or NAME:N:enospc "
            "(N >= 1, e.g. events.jsonl:4)"
        )
    return Failpoint(m[1], int(m[2]), m[3] == ":after", m[3] == ":enospc")


class _Armed:
    """This process's failpoint (read from the environment at first use) and its count."""

    def __init__(self) -> None:
        self.loaded, self.count = False, 0
        self.point: Failpoint | None = None

    def due(self, path: Path) -> Failpoint | None:
        """The failpoint when this append to ``path`` is the one to fail."""
        if not self.loaded:
            self.point, self.loaded = parse_failpoint(os.environ.get(FAILPOINT_ENV)), True
        fp = self.point
        if fp is None or path.name != fp.name:
            return None
        self.count += 1
        return fp if self.count == fp.n else None


_ARMED = _Armed()


# ------------------------------------------------------------------------------ writing


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is a write refused for want of space (ENOSPC, or a quota: EDQUOT)."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


class AppendLog:
    """An append-only file of complete records.

    Parameters
    ----------
    path : Path
        The file, created when missing.  A ``"jsonl"`` file that may end in a torn record
        must go through :func:`drop_torn_tail` first (opening one raises ValueError).
    kind : str
        ``"jsonl"`` or ``"records"``.
    """

    def __init__(self, path: Path, kind: str = "jsonl") -> None:
        _check_kind(kind)
        self.path, self.kind = Path(path), kind
        self._fh: BinaryIO = self.path.open("ab", buffering=0)  # nothing is held back
        if kind == "jsonl" and self._fh.tell() and _last_byte(self.path) != b"\n":
            self._fh.close()
            raise ValueError(f"{self.path}: ends in a torn record; call drop_torn_tail first")

    def append(self, data: bytes) -> None:
        """Write one complete record (a line with its ``b"\\n"``, or a length-prefixed record).

        Raises
        ------
        OSError
            The write failed (a full disk): the file is cut back to its last whole record and
            the error names it."""
        if self.kind == "jsonl":
            if not data.endswith(b"\n") or data.count(b"\n") != 1:
                raise ValueError(f"{self.path}: a jsonl record is one line ending in \\n")
        elif len(data) < _LEN or int.from_bytes(data[:_LEN], "big") != len(data) - _LEN:
            raise ValueError(f"{self.path}: a record is uint32 big-endian length || payload")
        fp = _ARMED.due(self.path)
        if fp is not None and not fp.after:
            data = data[: len(data) // 2]
        fd = self._fh.fileno()
        whole = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:  # an unbuffered write may take part of it
                view = view[os.write(fd, view) :]
            if fp is not None and fp.enospc:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as exc:
            os.ftruncate(fd, whole)
            raise OSError(exc.errno, exc.strerror, str(self.path)) from exc
        if fp is not None:  # the fault-injection point (module docstring)
            os.fsync(fd)
            os.kill(os.getpid(), signal.SIGKILL)

    def sync(self) -> None:
        """``os.fsync`` the file (flushed records survive a kill -9 without it; a power loss
        needs it)."""
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        """Close the file (records are already written)."""
        self._fh.close()

    def __enter__(self) -> AppendLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _last_byte(path: Path) -> bytes:
    with path.open("rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1)


# ------------------------------------------------------------------------------ reading


def _jsonl(fh: BinaryIO, path: Path) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """(end offset, record) of each complete line (record None for a blank line); stops
    before a torn tail; raises :class:`CorruptLogError` for a bad line that is not the last."""
    end, bad = 0, None
    for number, line in enumerate(fh, 1):
        if bad is not None:  # a bad line followed by another: not a torn tail
            raise CorruptLogError(f"{path}:{bad[0]}: not a JSON record ({bad[1]})")
        if not line.endswith(b"\n"):
            return  # torn: the writer always ends a record with its newline
        record = None
        if line.strip():
            try:
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise ValueError(f"a JSON {type(record).__name__}, not an object")
            except ValueError as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
                bad = (number, str(e).splitlines()[0] if str(e) else type(e).__name__)
                continue
        end += len(line)
        yield end, record


def _records_end(fh: BinaryIO, size: int) -> int:
    """The offset just past the last complete length-prefixed record."""
    pos = 0
    while pos < size:
        fh.seek(pos)
        n = int.from_bytes(fh.read(_LEN), "big")
        if pos + _LEN + n > size:  # short payload, or fewer than _LEN length bytes left
            break
        pos += _LEN + n
    return pos


def drop_torn_tail(path: Path, kind: str = "jsonl") -> int:
    """Make ``path`` end at its last complete record, truncating it in place.

    Parameters
    ----------
    path : Path
        The append-only file; a missing file is left missing.
    kind : str
        ``"jsonl"`` or ``"records"``.

    Returns
    -------
    int
        The number of bytes dropped (0 when the file is intact or missing).

    Raises
    ------
    CorruptLogError
        A jsonl line that is not the last does not parse (``"path:line: not a JSON record"``).
    """
    _check_kind(kind)
    path = Path(path)
    if not path.is_file():
        return 0
    with path.open("r+b") as fh:
        size = os.fstat(fh.fileno()).st_size
        if kind == "jsonl":
            end = max((e for e, _ in _jsonl(fh, path)), default=0)  # offsets only grow
        else:
            end = _records_end(fh, size)
        if end < size:
            fh.truncate(end)
    return size - end


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The complete records of a jsonl file, ignoring a torn tail (the file is not modified).

    A missing file has no records.  Raises :class:`CorruptLogError` for a bad line that is not
    the last.
    """
    path = Path(path)
    if not path.is_file():
        return []
    with path.open("rb") as fh:
        return [r for _, r in _jsonl(fh, path) if r is not None]
