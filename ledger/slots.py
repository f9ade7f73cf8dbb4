"""The shared-memory slots a round's rows travel through, driver to recorder (ledger v2).

The driver (:mod:`ledger.recorder`) owns the slots: it creates them, copies each round's ``[n, P]``
update matrix into one, and unlinks them at the end. The recorder (:mod:`ledger.host`) maps each
slot once (:class:`Views`) and reads the rows from there. For big rounds the slots are made when
the run starts and the recorder faults their pages in on its own core (:meth:`Views.prefault`),
so the driver's first copies do not pay the page faults.

On Linux a slot is an anonymous memory file (:class:`MemSlot`, ``memfd_create``), which the
recorder opens through ``/proc/PID/fd``; elsewhere a POSIX shared-memory segment. A segment lives
in ``/dev/shm``, a tmpfs that a Docker container gets at 64 MB unless told otherwise: a slot
beyond its free space is created all the same (sparse), and the first write to its missing pages
ended the recorder with SIGBUS (a 1,000-client digits round is 36 MB, three slots 108 MB; tried
under a 64 MB ``/dev/shm``, stop 47). A memory file has no such limit, and it is freed with the
last process that maps it, so even a kill -9 leaves nothing behind.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np

#: rounds whose rows take at least this many bytes get their slots faulted in ahead
PREFAULT_BYTES = 4 << 20
#: madvise options of Linux 5.14+ (not in Python 3.11's mmap module): map a range's pages now,
#: allocating them (write) or only mapping those that exist (read), without changing a byte
MADV_POPULATE_READ, MADV_POPULATE_WRITE = 22, 23


def populate(buf: Any, option: int) -> bool:
    """``madvise(option)`` over a whole mapping (an ``mmap``, or a ``SharedMemory``'s); False
    where the kernel or the object cannot (nothing is lost then: the pages fault in on use)."""
    m = getattr(buf, "_mmap", buf)
    try:
        m.madvise(option)
    except (AttributeError, OSError, ValueError):
        return False
    return True


class Views:
    """Shared-memory slots the driver wrote rows into, each mapped once (a slot the driver
    replaced with a bigger one is mapped again)."""

    def __init__(self) -> None:
        self.maps: dict[int, tuple[str, Any]] = {}

    def rows(self, slot: tuple[int, str, int, int] | None) -> np.ndarray:
        if slot is None:
            return np.zeros((0, 0), np.float32)
        i, name, n, d = slot
        if i not in self.maps or self.maps[i][0] != name:
            if i in self.maps:
                old = self.maps.pop(i)[1]
                try:
                    old.close() if isinstance(old, mmap.mmap) else old.release()
                except BufferError:  # a view of it is still alive: let the GC unmap it
                    pass
            self.maps[i] = (name, attach(name))
        return np.ndarray((n, d), "<f4", buffer=self.maps[i][1])

    def prefault(self, names: list[str]) -> None:
        """Map the driver's new slots ``names`` (slot ``i`` is ``names[i]``) and allocate their
        pages, without writing a byte (the driver may already be copying rows in). A slot that
        is gone is skipped: a round that uses it maps it then, and fails there if it must."""
        for i, name in enumerate(names):
            try:
                self.rows((i, name, 0, 0))  # maps it
            except OSError:  # the driver let it go already: this is only a head start
                continue
            m = self.maps[i][1]
            if not populate(m, MADV_POPULATE_WRITE):
                # an older kernel: reading a page of a shared mapping allocates it too
                np.frombuffer(m, np.uint8)[:: mmap.PAGESIZE].sum()

    def close(self) -> None:
        for _, m in self.maps.values():
            try:
                m.close() if isinstance(m, mmap.mmap) else m.release()
            except BufferError:
                pass
        self.maps.clear()


class MemSlot:
    """A slot in an anonymous memory file: the ``SharedMemory`` interface the driver uses
    (``buf``, ``size``, ``name``, ``close``, ``unlink``).

    Its ``name`` is the path the recorder opens, ``/proc/PID/fd/FD``, and a ``#N`` that no
    other slot of this process has had: a closed slot's descriptor number is reused by the next
    one, and the recorder maps a slot again only when its name changes."""

    _made = 0

    def __init__(self, tag: str, size: int) -> None:
        fd = os.memfd_create(tag, os.MFD_CLOEXEC)  # not inherited by the processes it starts
        try:
            os.ftruncate(fd, size)
            self._mmap = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        MemSlot._made += 1
        self._fd, self.size = fd, size
        self.name = f"/proc/{os.getpid()}/fd/{fd}#{MemSlot._made}"
        self.buf: memoryview | None = memoryview(self._mmap)

    def close(self) -> None:
        """Unmap it and close its descriptor (the recorder's own mapping stays valid)."""
        if self.buf is None:
            return
        self.buf.release()
        self.buf = None
        self._mmap.close()
        os.close(self._fd)

    def unlink(self) -> None:
        """Nothing to remove: the file has no name and goes with its last mapping."""


def attach(name: str) -> Any:
    if name.startswith("/proc/"):  # a MemSlot of the driver's
        with open(name.partition("#")[0], "r+b") as f:
            return mmap.mmap(f.fileno(), 0)
    path = Path("/dev/shm") / name.lstrip("/")
    if path.exists():
        with open(path, "r+b") as f:
            return mmap.mmap(f.fileno(), 0)
    from multiprocessing import resource_tracker, shared_memory

    shm = shared_memory.SharedMemory(name)
    # the driver owns it; the tracker registered it under its POSIX name, with a leading slash
    resource_tracker.unregister(f"/{shm.name}", "shared_memory")
    return shm.buf
