"""Canonical tensor bytes of FLChain (Majeed & Hong, 2019): updates and global models live off
chain (in round packs, :mod:`ledger.pack`), the chain keeps their hashes.

Tensors are serialized canonically, so the same tensors always give the same bytes and hash
whatever the dict order, memory layout or host byte order:

``b"FSBLOB1\\n"`` + 8-byte little-endian header length + header (JSON, sorted keys, no spaces:
``[[name, dtype, shape], ...]`` sorted by name, dtype as little-endian numpy strings such as
``"<f4"``) + each tensor's C-order little-endian bytes in the same order.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

MAGIC = b"FSBLOB1\n"


class BlobError(ValueError):
    """A blob is missing, corrupt (its bytes do not hash to its name) or malformed."""


def _as_numpy(t: Any) -> np.ndarray:
    if hasattr(t, "detach"):  # torch tensor
        t = t.detach().cpu().numpy()
    return np.asarray(t)


def canonical_bytes(tensors: Mapping[str, Any]) -> bytes:
    """Canonical serialization of named tensors (numpy arrays or torch tensors)."""
    header, chunks = [], []
    for name in sorted(tensors):
        a = _as_numpy(tensors[name])
        le = a.astype(a.dtype.newbyteorder("<"), copy=False)
        header.append([name, le.dtype.str, list(a.shape)])
        chunks.append(np.ascontiguousarray(le).tobytes())
    head = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    return MAGIC + len(head).to_bytes(8, "little") + head + b"".join(chunks)


def decode(data: bytes) -> dict[str, np.ndarray]:
    """Inverse of :func:`canonical_bytes`."""
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 8:
        raise BlobError("not a FedSentry tensor blob (bad magic)")
    n = int.from_bytes(data[len(MAGIC) : len(MAGIC) + 8], "little")
    start = len(MAGIC) + 8
    try:
        header = json.loads(data[start : start + n])
    except ValueError:
        raise BlobError("tensor blob header is not valid JSON") from None
    pos, out = start + n, {}
    for name, dtype, shape in header:
        dt = np.dtype(dtype)
        size = dt.itemsize * int(np.prod(shape, dtype=np.int64))
        if pos + size > len(data):
            raise BlobError(f"tensor blob truncated in {name!r}")
        out[name] = np.frombuffer(data[pos : pos + size], dtype=dt).reshape(shape).copy()
        pos += size
    if pos != len(data):
        raise BlobError(f"tensor blob has {len(data) - pos} trailing bytes")
    return out


def write_json_atomic(path: Path, obj: Any, indent: int | None = 1) -> None:
    """Write JSON to ``path`` through a temporary file and a rename: never half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=indent))
    os.replace(tmp, path)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
