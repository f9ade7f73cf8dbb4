"""Canonical tensor bytes of the ledger: by hand, whatever the layout, malformed input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ledger.store import MAGIC, BlobError, canonical_bytes, decode


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


def test_malformed_blobs_are_rejected() -> None:
    with pytest.raises(BlobError, match="bad magic"):
        decode(b"nope")
    good = canonical_bytes({"w": np.zeros(4, np.float32)})
    with pytest.raises(BlobError, match="truncated"):
        decode(good[:-1])
    with pytest.raises(BlobError, match="trailing"):
        decode(good + b"x")
