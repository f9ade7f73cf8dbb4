"""Round packs: everything one FLChain round stores off chain, in one content-addressed file.

Ledger v1 wrote two files per client per round (update and signed record); at 1,000 clients a
round that is 2,000 files a round. A pack holds a whole round: the new global model, the verdict
document, the admission list and, per submission, the update blob and the signed record.

Layout: ``b"FSPACK2\\n"`` + 8-byte little-endian index length + index + payload. The index is
canonical JSON ``{"v": 2, "round": r, "entries": [[name, sha256 hex, offset, length], ...]}``
(offsets into the payload). A pack is named by the SHA-256 of its index (its *pack id*, which
the round's on-chain commitment carries) and each entry by the SHA-256 of its bytes, so the whole
file is verifiable by hash: the index against its name, every entry against the index, without
hashing the payload twice.

Entry names: ``global``, ``verdicts``, ``admitted``, ``update/<client>``, ``record/<client>``.

Packs of :data:`DIRECT_MIN` bytes or more (a 1,000-client round's is ~37 MB) are written with
``O_DIRECT``, past the page cache (:func:`_write_direct`); the bytes are the same either way.
"""

from __future__ import annotations

import errno
import hashlib
import json
import mmap
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.records import canonical_json

MAGIC = b"FSPACK2\n"
PACK_VERSION = 2
_IOV_MAX = 512  # buffers per os.writev call (Linux allows 1024)
#: packs at least this large are written with ``O_DIRECT`` (:func:`_write_direct`)
DIRECT_MIN = 1 << 20
_ALIGN = 4096  # O_DIRECT's alignment of buffer, offset and length (any block size up to it)

Buffer = bytes | bytearray | memoryview


class PackError(ValueError):
    """A pack is missing, unreadable, or its index does not hash to its name."""


@dataclass(frozen=True)
class Entry:
    """One pack entry to write: its name, its SHA-256 and its bytes (one or more buffers,
    concatenated: e.g. a blob header and a row of a shared-memory matrix, never copied)."""

    name: str
    digest: bytes
    parts: Sequence[Buffer]

    @classmethod
    def of(cls, name: str, data: Buffer) -> Entry:
        return cls(name, hashlib.sha256(data).digest(), (data,))

    @property
    def size(self) -> int:
        return sum(memoryview(p).nbytes for p in self.parts)


def pack_path(directory: Path, pack_id: bytes | str) -> Path:
    """Where the pack named ``pack_id`` lives under a ledger directory."""
    name = pack_id.hex() if isinstance(pack_id, bytes) else pack_id.removeprefix("0x")
    return Path(directory) / "packs" / name


def write_pack(directory: Path, rnd: int, entries: Sequence[Entry]) -> bytes:
    """Write a round's pack (atomically: a temporary file, then a rename); returns its id.

    Writing the same entries again gives the same bytes and id (a resumed run rewrites nothing).
    """
    rows, at = [], 0
    for e in entries:
        size = e.size
        rows.append([e.name, e.digest.hex(), at, size])
        at += size
    index = canonical_json({"v": PACK_VERSION, "round": int(rnd), "entries": rows})
    pack_id = hashlib.sha256(index).digest()
    path = pack_path(directory, pack_id)
    if path.is_file():
        return pack_id
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    bufs: list[Buffer] = [MAGIC, len(index).to_bytes(8, "little"), index]
    bufs += [p for e in entries for p in e.parts]
    total = len(MAGIC) + 8 + len(index) + at
    try:
        if total < DIRECT_MIN or not _write_direct(tmp, bufs, total):
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                for i in range(0, len(bufs), _IOV_MAX):
                    _writev_all(fd, bufs[i : i + _IOV_MAX])
            finally:
                os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:  # a full disk: no partial file keeps the space it took
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    return pack_id


class _Stage:
    """A page-aligned buffer that a process's large packs are assembled in (kept and reused:
    a fresh 37 MB mapping costs ~30 ms of page faults)."""

    lock = threading.Lock()
    buf: mmap.mmap | None = None

    @classmethod
    def get(cls, size: int) -> mmap.mmap:
        if cls.buf is None or len(cls.buf) < size:
            if cls.buf is not None:
                cls.buf.close()
            cls.buf = mmap.mmap(-1, size)
        return cls.buf


def _write_direct(tmp: Path, bufs: Sequence[Buffer], total: int) -> bool:
    """Write a pack's ``total`` bytes to ``tmp`` with ``O_DIRECT`` (False, having written
    nothing, where the OS or the file system has no direct I/O).

    Through the page cache, a 37 MB pack (1,000 digits-MLP rows) cost this machine 80-150 ms
    of CPU once ~100 MB of the disk's writes were dirty (9 ms before), in the writing process
    itself; direct from an aligned buffer it costs ~8 ms of CPU to assemble, ~1 ms to write
    and ~23 ms of wall time in all. The bytes are the same: the buffer is padded to the
    alignment for the write and the file truncated to ``total``."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return False
    padded = -(-total // _ALIGN) * _ALIGN
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | flag, 0o644)
    except OSError as exc:
        if exc.errno == errno.EINVAL:  # a file system without direct I/O (e.g. some tmpfs)
            return False
        raise
    try:
        with _Stage.lock:
            with memoryview(_Stage.get(padded)) as view:
                at = 0
                for b in bufs:
                    m = memoryview(b).cast("B")
                    view[at : at + m.nbytes] = m
                    at += m.nbytes
                view[at:padded] = bytes(padded - at)
                done = 0
                while done < padded:
                    try:
                        done += os.write(fd, view[done:padded])
                    except OSError as exc:
                        if exc.errno == errno.EINVAL and done == 0:  # refused at the first write
                            return False
                        raise
        os.ftruncate(fd, total)
    finally:
        os.close(fd)
    return True


def _writev_all(fd: int, bufs: Sequence[Buffer]) -> None:
    views = [memoryview(b).cast("B") for b in bufs]
    while views:
        n = os.writev(fd, views)
        while views and n >= views[0].nbytes:
            n -= views[0].nbytes
            views.pop(0)
        if views and n:
            views[0] = views[0][n:]


class Pack:
    """A pack read back: its index and the bytes of each entry (slices of one buffer).

    Parameters
    ----------
    data : bytes
        The file's bytes.
    pack_id : bytes, optional
        The name it was stored under; :class:`PackError` if the index does not hash to it.
    """

    def __init__(self, data: bytes, pack_id: bytes | None = None) -> None:
        if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 8:
            raise PackError("not a FedSentry round pack (bad magic)")
        n = int.from_bytes(data[len(MAGIC) : len(MAGIC) + 8], "little")
        start = len(MAGIC) + 8
        self.index_bytes = data[start : start + n]
        self.id = hashlib.sha256(self.index_bytes).digest()
        if pack_id is not None and self.id != pack_id:
            raise PackError(f"index hashes to {self.id.hex()}, not to its name {pack_id.hex()}")
        try:
            index = json.loads(self.index_bytes)
            self.round = int(index["round"])
            entries = [
                (str(a), bytes.fromhex(b), int(c), int(d)) for a, b, c, d in index["entries"]
            ]
        except (ValueError, KeyError, TypeError) as exc:
            raise PackError(f"unreadable index: {exc}") from None
        self._data = memoryview(data)
        self._payload = start + n
        self.entries = {name: (digest, off, size) for name, digest, off, size in entries}
        self.names = [e[0] for e in entries]
        if len(self.entries) != len(entries):
            raise PackError("index names an entry twice")

    @classmethod
    def read(cls, directory: Path, pack_id: bytes) -> Pack:
        """The pack ``pack_id`` of a ledger directory (:class:`PackError` if missing/corrupt)."""
        path = pack_path(directory, pack_id)
        try:
            data = path.read_bytes()
        except OSError:
            raise PackError(f"pack {pack_id.hex()} is missing from {path.parent}") from None
        return cls(data, pack_id)

    def digest(self, name: str) -> bytes:
        """The SHA-256 the index gives for entry ``name`` (KeyError if absent)."""
        return self.entries[name][0]

    def raw(self, name: str) -> memoryview:
        """Entry ``name``'s bytes, unchecked (KeyError if absent; a truncated file gives fewer
        bytes, which :meth:`ok` reports)."""
        _, off, size = self.entries[name]
        return self._data[self._payload + off : self._payload + off + size]

    def span(self, name: str) -> tuple[int, int]:
        """Where entry ``name`` lies in the file: (byte offset, length)."""
        _, off, size = self.entries[name]
        return self._payload + off, size

    def ok(self, name: str) -> bool:
        """Whether entry ``name``'s bytes hash to the index's digest."""
        return hashlib.sha256(self.raw(name)).digest() == self.entries[name][0]

    def clients(self, kind: str) -> Iterator[int]:
        """Client ids of the ``update`` or ``record`` entries, in index order."""
        prefix = kind + "/"
        for name in self.names:
            if name.startswith(prefix):
                yield int(name[len(prefix) :])

    def to_entries(self) -> list[Entry]:
        """The entries as :class:`Entry` objects (for rewriting a pack, e.g. by the tamper
        cases)."""
        return [Entry(n, self.entries[n][0], (bytes(self.raw(n)),)) for n in self.names]


def entry_json(pack: Pack, name: str) -> Any:
    """Entry ``name`` parsed as JSON (PackError if it is not)."""
    try:
        return json.loads(bytes(pack.raw(name)))
    except (ValueError, KeyError) as exc:
        raise PackError(f"entry {name!r} is not JSON: {exc}") from None
