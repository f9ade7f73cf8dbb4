"""The off-chain, content-addressed store of FLChain (Majeed & Hong, 2019): updates and global
models live off chain; the chain keeps their hashes.

Blobs are files ``<root>/blobs/sha256/<hex>`` named by the SHA-256 of their bytes. Tensors are
serialized canonically, so the same tensors always give the same bytes and hash whatever the
dict order, memory layout or host byte order:

``b"FSBLOB1\\n"`` + 8-byte little-endian header length + header (JSON, sorted keys, no spaces:
``[[name, dtype, shape], ...]`` sorted by name, dtype as little-endian numpy strings such as
``"<f4"``) + each tensor's C-order little-endian bytes in the same order.

Reading a blob re-hashes it, so a blob edited on disk is reported, never silently used.
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
    n = int.from_bytes(data[len(MAGIC):len(MAGIC) + 8], "little")
    start = len(MAGIC) + 8
    try:
        header = json.loads(data[start:start + n])
    except ValueError:
        raise BlobError("tensor blob header is not valid JSON") from None
    pos, out = start + n, {}
    for name, dtype, shape in header:
        dt = np.dtype(dtype)
        size = dt.itemsize * int(np.prod(shape, dtype=np.int64))
        if pos + size > len(data):
            raise BlobError(f"tensor blob truncated in {name!r}")
        out[name] = np.frombuffer(data[pos:pos + size], dtype=dt).reshape(shape).copy()
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


class BlobStore:
    """Content-addressed files under ``<root>/blobs/sha256/``."""

    def __init__(self, root: str | Path) -> None:
        self.dir = Path(root) / "blobs" / "sha256"

    def path(self, digest: str) -> Path:
        return self.dir / digest

    def has(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def put(self, data: bytes) -> str:
        """Store ``data`` (idempotent, atomic) and return its SHA-256 hex digest."""
        digest = sha256_hex(data)
        p = self.path(digest)
        if p.is_file():
            return digest
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{digest}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(p)
        return digest

    def get(self, digest: str) -> bytes:
        """The blob's bytes; raises :class:`BlobError` if missing or if its bytes were changed."""
        p = self.path(digest)
        if not p.is_file():
            raise BlobError(f"blob {digest} is missing from {self.dir}")
        data = p.read_bytes()
        found = sha256_hex(data)
        if found != digest:
            raise BlobError(f"blob {digest} is corrupt: its bytes hash to {found}")
        return data

    def put_tensors(self, tensors: Mapping[str, Any]) -> str:
        return self.put(canonical_bytes(tensors))

    def get_tensors(self, digest: str) -> dict[str, np.ndarray]:
        return decode(self.get(digest))
