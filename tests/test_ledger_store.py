"""The content-addressed store: canonical bytes, round trips, tamper detection."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch

from ledger.store import MAGIC, BlobError, BlobStore, canonical_bytes, decode


def test_canonical_bytes_by_hand() -> None:
    b = canonical_bytes({"w": np.array([1.0], np.float32)})
    head = b'[["w","<f4",[1]]]'
    assert b == MAGIC + len(head).to_bytes(8, "little") + head + b"\x00\x00\x80\x3f"


def test_same_tensors_same_bytes_whatever_order_layout_or_byte_order() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = {"b": a, "a": np.array([1, 2], np.int64)}
    y = {"a": np.array([1, 2], dtype=">i8"), "b": np.asfortranarray(a)}
    z = {"a": torch.tensor([1, 2]), "b": torch.from_numpy(a)}
    assert canonical_bytes(x) == canonical_bytes(y) == canonical_bytes(z)
    out = decode(canonical_bytes(y))
    assert list(out) == ["a", "b"] and out["a"].dtype == np.dtype("<i8")
    np.testing.assert_array_equal(out["b"], a)


def test_store_round_trip_idempotent_and_named_by_hash(tmp_path: Path) -> None:
    st = BlobStore(tmp_path)
    t = {"update": np.linspace(0, 1, 5, dtype=np.float32)}
    h = st.put_tensors(t)
    assert h == hashlib.sha256(canonical_bytes(t)).hexdigest()
    assert st.path(h) == tmp_path / "blobs" / "sha256" / h and st.has(h)
    assert st.put_tensors(t) == h
    np.testing.assert_array_equal(st.get_tensors(h)["update"], t["update"])


def test_tampered_or_missing_blob_is_reported(tmp_path: Path) -> None:
    st = BlobStore(tmp_path)
    h = st.put(b"hello")
    st.path(h).write_bytes(b"hellO")
    with pytest.raises(BlobError, match=f"blob {h} is corrupt"):
        st.get(h)
    with pytest.raises(BlobError, match="is missing"):
        st.get("0" * 64)


def test_malformed_blobs_are_rejected() -> None:
    with pytest.raises(BlobError, match="bad magic"):
        decode(b"nope")
    good = canonical_bytes({"w": np.zeros(4, np.float32)})
    with pytest.raises(BlobError, match="truncated"):
        decode(good[:-1])
    with pytest.raises(BlobError, match="trailing"):
        decode(good + b"x")
