"""Files behind :class:`simulator.state.store.ClientStore`: the spill tier and the checkpoints.

Spill files
    :class:`SpillFile` keeps the rows of one table that do not fit in RAM in a numpy memmap
    file.  The file grows geometrically; slots freed by a delete (or by a row moving back to
    RAM) are reused before the file grows.  Nothing in it outlives the store: a new process
    never reads another one's spill files.  It is defined in :mod:`simulator.state.spill`.

Checkpoints
    A checkpoint directory holds ``manifest.json`` and the row files it lists, in order:
    one ``NNNNNNNN-snapshot.npz`` followed by zero or more ``NNNNNNNN-delta.npz``.  A row file
    is an uncompressed ``.npz`` (readable with :func:`numpy.load`) with, for the table at
    position ``i`` of the manifest's ``tables`` list, the members ``ids_i`` (int64, the
    clients whose rows were written), ``values_i`` (``[len(ids_i), *shape]`` in the table's
    dtype) and ``deleted_i`` (int64, clients whose rows were removed).  Members are streamed
    in blocks, so writing or replaying a checkpoint never holds a whole table in memory, and
    the zip CRC of each member is checked when it is read back.  Every file is written to a
    temporary name, fsynced and renamed; the manifest is renamed last, so a crash at any point
    leaves the previous manifest, and every file it lists, in place.  A save removes only the
    row files that neither its manifest nor the one it replaced lists (see
    :mod:`simulator.state.checkpoint`), so a caller that records the manifest in its own
    checkpoint can make that checkpoint the commit point.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from simulator.state.rows import StoreError

MANIFEST = "manifest.json"
FORMAT = "fedsentry-client-store"
VERSION = 1
BLOCK_BYTES = 16 << 20  # rows are streamed to and from checkpoint files in blocks of ~16 MiB
_ROW_FILE = re.compile(r"^(\d{8})-(snapshot|delta)\.npz$")
_TEMP_FILE = re.compile(r"^\.(\d{8}-(snapshot|delta)\.npz|manifest\.json)\.tmp$")


def block_rows(row_bytes: int) -> int:
    """How many rows of ``row_bytes`` bytes make one streaming block (at least 1)."""
    return max(1, BLOCK_BYTES // max(1, row_bytes))


# --------------------------------------------------------------------------- checkpoints

Member = tuple[str, np.dtype, tuple[int, ...], Iterable[np.ndarray]]


def write_row_file(directory: Path, name: str, members: Iterable[Member]) -> int:
    """Atomically write the row file ``directory/name`` and return its size in bytes.

    Each member is ``(key, dtype, shape, blocks)``: an array of ``shape`` streamed as the
    row blocks ``blocks`` (stacked along the first axis).
    """
    final = directory / name
    temp = directory / f".{name}.tmp"
    with _removed_on_error(temp), temp.open("wb") as fh:
        with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            for key, dtype, shape, blocks in members:
                with zf.open(f"{key}.npy", "w", force_zip64=True) as out:
                    header = {
                        "descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                        "fortran_order": False,
                        "shape": tuple(shape),
                    }
                    np.lib.format.write_array_header_1_0(out, header)
                    rows = 0
                    for block in blocks:
                        block = np.ascontiguousarray(block, dtype=dtype)
                        rows += len(block)
                        out.write(block.reshape(-1).view(np.uint8))
                    if rows != shape[0]:
                        raise RuntimeError(f"{key}: wrote {rows} rows, header says {shape[0]}")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(temp, final)
    return final.stat().st_size


class RowFileReader:
    """Streaming reader of one row file; use as a context manager."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self._zip = zipfile.ZipFile(self.path)
        except (OSError, zipfile.BadZipFile) as exc:
            raise StoreError(f"checkpoint file {self.path} is unreadable: {exc}") from None
        self._names = {n[:-4] for n in self._zip.namelist() if n.endswith(".npy")}

    def __enter__(self) -> RowFileReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self._zip.close()

    def __contains__(self, key: str) -> bool:
        return key in self._names

    def read(self, key: str) -> np.ndarray:
        """The whole member ``key`` (used for the small id arrays)."""
        blocks = list(self.blocks(key, None, None))
        return blocks[0] if len(blocks) == 1 else np.concatenate(blocks)

    def blocks(
        self,
        key: str,
        dtype: np.dtype | None,
        row_shape: tuple[int, ...] | None,
        rows_per_block: int | None = None,
    ) -> Iterator[np.ndarray]:
        """Yield member ``key`` in blocks of rows, checking its dtype and row shape if given."""
        try:
            with self._zip.open(f"{key}.npy") as fh:
                major, _ = np.lib.format.read_magic(fh)
                read_header = (
                    np.lib.format.read_array_header_1_0
                    if major == 1
                    else np.lib.format.read_array_header_2_0
                )
                shape, fortran, got = read_header(fh)
                if fortran or not shape:
                    raise StoreError(f"checkpoint file {self.path}: member {key} has a bad layout")
                if dtype is not None and (got != dtype or tuple(shape[1:]) != row_shape):
                    raise StoreError(
                        f"checkpoint file {self.path}: member {key} holds {got} rows of shape "
                        f"{tuple(shape[1:])}, expected {dtype} rows of shape {row_shape}"
                    )
                row_bytes = got.itemsize * int(np.prod(shape[1:], dtype=np.int64))
                step = rows_per_block or max(1, shape[0])
                for start in range(0, shape[0], step):
                    n = min(step, shape[0] - start)
                    data = fh.read(n * row_bytes)
                    if len(data) != n * row_bytes:
                        raise StoreError(f"checkpoint file {self.path}: member {key} is truncated")
                    yield np.frombuffer(data, got).reshape(n, *shape[1:])
                if shape[0] == 0:
                    yield np.empty(shape, got)
                fh.read()  # reach the end, so that zipfile checks the member's CRC
        except (KeyError, ValueError, OSError, zipfile.BadZipFile) as exc:
            if isinstance(exc, StoreError):
                raise
            raise StoreError(f"checkpoint file {self.path}: member {key}: {exc}") from None


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """The manifest in ``directory``; None when there is none, StoreError when it is bad."""
    path = directory / MANIFEST
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StoreError(f"checkpoint manifest {path} is unreadable: {exc}") from None
    return check_manifest(data, str(path))


def check_manifest(data: Any, where: str) -> dict[str, Any]:
    """``data`` if it is a manifest this code reads, else StoreError naming ``where``."""
    keys = {"format", "version", "lineage", "seq", "tables", "files"}
    if not isinstance(data, dict) or not keys <= data.keys() or data["format"] != FORMAT:
        raise StoreError(f"{where} is not a {FORMAT} manifest")
    if data["version"] != VERSION:
        raise StoreError(f"{where} has version {data['version']!r}, this code reads {VERSION}")
    entries = data["files"]
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and isinstance(e.get("name"), str) and _ROW_FILE.match(e["name"])
        for e in entries
    ):
        raise StoreError(f"{where} lists its row files wrongly: {entries!r}")
    return data


def write_manifest(directory: Path, manifest: dict[str, Any]) -> None:
    """Atomically replace ``directory/manifest.json`` (temp file, fsync, rename, dir fsync)."""
    temp = directory / f".{MANIFEST}.tmp"
    with _removed_on_error(temp), temp.open("w") as fh:
        json.dump(manifest, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(temp, directory / MANIFEST)
    _fsync_dir(directory)


@contextmanager
def _removed_on_error(temp: Path) -> Iterator[None]:
    """Write ``temp`` in the body; on an ``OSError`` (a full disk), delete it, so that no
    partial file keeps the space it took, and raise it again naming ``temp``.  The previous
    checkpoint is left as it was."""
    try:
        yield
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(temp)) from exc


def next_seq(directory: Path, manifest: dict[str, Any] | None) -> int:
    """A sequence number above the manifest's and above every row file present."""
    seqs = [int(m.group(1)) for p in directory.iterdir() if (m := _ROW_FILE.match(p.name))]
    return max([0, *seqs, manifest["seq"] if manifest else 0]) + 1


def row_file_name(seq: int, kind: str) -> str:
    """File name of the row file number ``seq`` of ``kind`` ('snapshot' or 'delta')."""
    return f"{seq:08d}-{kind}.npz"


def remove_unreferenced(directory: Path, keep: set[str]) -> None:
    """Delete row files not in ``keep`` and leftover temporary files of an interrupted save."""
    for path in directory.iterdir():
        if (_ROW_FILE.match(path.name) and path.name not in keep) or _TEMP_FILE.match(path.name):
            path.unlink(missing_ok=True)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)
