"""Round packs (ledger v2): the layout by hand, addressing by hash, tamper detection."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from ledger.pack import MAGIC, Entry, Pack, PackError, pack_path, write_pack
from ledger.pack_rows import rows_of_pack
from ledger.records import update_prefix
from ledger.round_build import hash_rows


def sha(b: bytes) -> bytes:
    return hashlib.sha256(b).digest()


def test_layout_by_hand(tmp_path: Path) -> None:
    pid = write_pack(tmp_path, 3, [Entry.of("global", b"GG"), Entry.of("verdicts", b"VVV")])
    index = (
        b'{"entries":[["global","' + sha(b"GG").hex().encode() + b'",0,2],'
        b'["verdicts","' + sha(b"VVV").hex().encode() + b'",2,3]],"round":3,"v":2}'
    )
    assert pid == sha(index)
    data = pack_path(tmp_path, pid).read_bytes()
    assert data == MAGIC + len(index).to_bytes(8, "little") + index + b"GGVVV"
    p = Pack.read(tmp_path, pid)
    assert (p.round, p.names, bytes(p.raw("verdicts"))) == (3, ["global", "verdicts"], b"VVV")
    assert p.ok("global") and p.span("verdicts") == (len(data) - 3, 3)
    # the same entries give the same pack; a different one another
    assert (
        write_pack(tmp_path, 3, [Entry.of("global", b"GG"), Entry.of("verdicts", b"VVV")])
        == pid
        != write_pack(tmp_path, 4, [Entry.of("global", b"GG")])
    )


def test_many_buffers_and_rows_from_a_matrix(tmp_path: Path) -> None:
    rows = np.arange(3000 * 4, dtype=np.float32).reshape(3000, 4)  # > one writev's buffers
    digests = hash_rows(rows)
    assert digests[5] == sha(update_prefix(4) + rows[5].tobytes())
    entries = [
        Entry(f"update/{i}", digests[i], (update_prefix(4), rows[i])) for i in range(len(rows))
    ]
    pid = write_pack(tmp_path, 0, entries)
    p = Pack.read(tmp_path, pid)
    got, ids = rows_of_pack(p, 4)
    assert ids == list(range(3000)) and np.array_equal(got, rows)
    assert all(p.ok(f"update/{i}") for i in (0, 1234, 2999))
    with pytest.raises(ValueError, match="expected"):
        rows_of_pack(p, 5)


def _direct_io(directory: Path) -> bool:
    """Whether ``directory``'s file system takes O_DIRECT writes."""
    import os

    if not hasattr(os, "O_DIRECT"):
        return False
    try:
        fd = os.open(directory / "probe", os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
    except OSError:
        return False
    os.close(fd)
    return True


@pytest.mark.parametrize("direct", [False, True])
def test_a_full_disk_leaves_no_partial_pack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct: bool
) -> None:
    """The disk fills after the first write (10 bytes, or a 4,096-byte block direct): the
    error names the pack, and the directory holds no partial file keeping the space (through
    the page cache, and direct where it may be)."""
    import errno
    import os

    import ledger.pack as pack_mod

    if direct and not _direct_io(tmp_path):
        pytest.skip("this file system takes no O_DIRECT writes")
    monkeypatch.setattr(pack_mod, "DIRECT_MIN", 1 if direct else 1 << 40)
    real = os.write if direct else os.writev
    name = "write" if direct else "writev"

    calls: list[int] = []

    def full(fd: int, data):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 1:
            return real(fd, data[:4096] if direct else [memoryview(data[0])[:10]])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pack_mod.os, name, full)
    entries = [Entry.of("global", b"G" * 5000)]
    with pytest.raises(OSError, match="No space left on device") as err:
        write_pack(tmp_path, 1, entries)
    assert list((tmp_path / "packs").iterdir()) == []
    monkeypatch.setattr(pack_mod.os, name, real)
    pid = write_pack(tmp_path, 1, entries)
    assert err.value.filename == str(pack_path(tmp_path, pid))
    assert [p.name for p in (tmp_path / "packs").iterdir()] == [pid.hex()]


def test_large_packs_written_direct_have_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pack of at least DIRECT_MIN bytes is assembled in an aligned buffer and written with
    O_DIRECT (padded to 4,096 bytes, then truncated): the same bytes as through the page cache,
    and the same when the file system refuses direct I/O."""
    import os

    import ledger.pack as pack_mod

    if not _direct_io(tmp_path):
        pytest.skip("this file system takes no O_DIRECT writes")
    rows = np.arange(700 * 5, dtype=np.float32).reshape(700, 5)
    entries = [Entry.of("global", b"G" * 7)] + [
        Entry(f"update/{i}", sha(update_prefix(5) + rows[i].tobytes()), (update_prefix(5), rows[i]))
        for i in range(len(rows))
    ]
    total, real = 0, pack_mod._write_direct
    for name, lim in (("cached", 1 << 40), ("direct", 1)):
        monkeypatch.setattr(pack_mod, "DIRECT_MIN", lim)
        calls: list[tuple[int, bool]] = []

        def spy(*a, c=calls):  # type: ignore[no-untyped-def]
            c.append((a[2], real(*a)))  # (bytes, written direct)
            return c[-1][1]

        monkeypatch.setattr(pack_mod, "_write_direct", spy)
        pid = write_pack(tmp_path / name, 0, entries)
        total = len(pack_path(tmp_path / name, pid).read_bytes())
        assert calls == ([] if name == "cached" else [(total, True)])
    assert total % 4096 != 0  # so the padding had to go
    cached = pack_path(tmp_path / "cached", pid).read_bytes()
    assert pack_path(tmp_path / "direct", pid).read_bytes() == cached
    assert np.array_equal(rows_of_pack(Pack.read(tmp_path / "direct", pid), 5)[0], rows)
    # a file system without direct I/O: refused at open, the page cache writes it
    real_open = os.open

    def no_direct(path, flags, *a):  # type: ignore[no-untyped-def]
        if flags & os.O_DIRECT:
            raise OSError(22, "Invalid argument")
        return real_open(path, flags, *a)

    monkeypatch.setattr(os, "open", no_direct)
    pid2 = write_pack(tmp_path / "refused", 0, entries)
    assert pid2 == pid and pack_path(tmp_path / "refused", pid).read_bytes() == cached


def test_extras_follow_their_row_in_the_update_entry(tmp_path: Path) -> None:
    """A client's extras are a canonical tensor blob right after its row, covered by the
    update hash; a round without extras records exactly the rows (the old bytes)."""
    from ledger.round_build import RoundRows
    from ledger.store import canonical_bytes

    rows = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    dc = np.array([[0.5], [1.5]], np.float32)
    data = RoundRows(
        0,
        rows,
        np.array([7, 9]),
        np.array([5, 6]),
        np.zeros(2, np.int64),
        np.zeros(2, np.float32),
        np.zeros(2, bool),
        np.zeros(3, np.float32),
        {},
        {"dc": dc},
    )
    tails = data.tails()
    assert tails[1] == canonical_bytes({"dc": np.array([1.5], np.float32)})
    digests = hash_rows(rows, tails)
    assert digests[1] == sha(update_prefix(2) + rows[1].tobytes() + tails[1])
    assert hash_rows(rows) == [sha(update_prefix(2) + r.tobytes()) for r in rows]
    entries = [
        Entry(f"update/{c}", digests[i], (update_prefix(2), rows[i], tails[i]))
        for i, c in enumerate((7, 9))
    ]
    p = Pack.read(tmp_path, write_pack(tmp_path, 0, entries))
    extras: dict[int, dict[str, np.ndarray]] = {}
    got, ids = rows_of_pack(p, 2, extras)
    assert ids == [7, 9] and np.array_equal(got, rows)
    assert sorted(extras) == [7, 9] and extras[9]["dc"].tolist() == [1.5]
    assert data.extras_of()[7]["dc"].tolist() == [0.5]
    with pytest.raises(ValueError, match="has 83 bytes, expected 45"):
        rows_of_pack(p, 2)  # a reader that expects no extras refuses them


def test_tampering_is_seen(tmp_path: Path) -> None:
    pid = write_pack(tmp_path, 0, [Entry.of("a", b"hello"), Entry.of("b", b"world")])
    path = pack_path(tmp_path, pid)
    data = bytearray(path.read_bytes())
    data[-1] ^= 1  # an entry's bytes: the index still names the pack, the entry fails
    path.write_bytes(bytes(data))
    p = Pack.read(tmp_path, pid)
    assert p.ok("a") and not p.ok("b")
    data[len(MAGIC) + 8 + 5] ^= 1  # the index: the pack is no longer what its name says
    path.write_bytes(bytes(data))
    with pytest.raises(PackError, match="not to its name"):
        Pack.read(tmp_path, pid)
    with pytest.raises(PackError, match="missing"):
        Pack.read(tmp_path, b"\x00" * 32)
    with pytest.raises(PackError, match="bad magic"):
        Pack(b"nope")
