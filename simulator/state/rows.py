"""What :class:`~simulator.state.store.ClientStore` accepts, checked: table declarations,
client ids and row values; :class:`StoreError` for anything it refuses or cannot read."""

from __future__ import annotations

from numbers import Integral
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from simulator.state.table import Table


class StoreError(ValueError):
    """A misuse of a :class:`~simulator.state.store.ClientStore` or an unusable checkpoint."""


def check_declaration(
    table: str, shape: int | tuple[int, ...], dtype: DTypeLike
) -> tuple[tuple[int, ...], np.dtype]:
    """``(shape, dtype)`` of a table declaration in canonical form, or StoreError: a non-empty
    name, positive integer dimensions, a numeric or bool dtype."""
    if not isinstance(table, str) or not table:
        raise StoreError(f"table name must be a non-empty string, got {table!r}")
    shape = (shape,) if isinstance(shape, Integral) else tuple(shape)
    if not all(isinstance(s, Integral) and s > 0 for s in shape):
        raise StoreError(f"table {table!r}: shape must be positive integers, got {shape}")
    shape = tuple(int(s) for s in shape)
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise StoreError(f"table {table!r}: bad dtype {dtype!r} ({exc})") from None
    if dt.kind not in "biufc" or dt.fields is not None or dt.subdtype is not None:
        raise StoreError(f"table {table!r}: dtype must be numeric or bool, got {dt}")
    return shape, dt


def as_ids(ids: Any) -> np.ndarray:
    """``ids`` as a 1-D int64 array, or StoreError."""
    arr = np.asarray(ids)
    if arr.ndim != 1:
        raise StoreError(f"ids must be a 1-D integer array, got shape {arr.shape}")
    if arr.size == 0:
        return np.empty(0, np.int64)
    if arr.dtype.kind not in "iu":
        raise StoreError(f"ids must be integers, got dtype {arr.dtype}")
    if arr.dtype == np.uint64 and arr.max() > np.iinfo(np.int64).max:
        raise StoreError(f"ids must fit in int64, got {arr.max()}")
    return arr.astype(np.int64, copy=False)


def check_unique(t: Table, ids: np.ndarray) -> None:
    """StoreError naming the first repeated client of ``ids`` (a put into ``t``)."""
    if len(ids) > 1:
        s = np.sort(ids)
        dup = s[1:][s[1:] == s[:-1]]
        if len(dup):
            raise StoreError(f"table {t.name!r}: put ids must be unique, {dup[0]} repeats")


def as_values(t: Table, values: Any, k: int) -> np.ndarray:
    """``values`` as a ``[k, *shape]`` array of ``t``'s dtype, or StoreError."""
    arr = np.asarray(values)
    if arr.shape != (k, *t.shape):
        raise StoreError(
            f"table {t.name!r}: values have shape {arr.shape}, expected {(k, *t.shape)}"
        )
    if arr.dtype != t.dtype:
        if not np.can_cast(arr.dtype, t.dtype, casting="same_kind"):
            raise StoreError(
                f"table {t.name!r}: cannot store {arr.dtype} values in a {t.dtype} table"
            )
        arr = arr.astype(t.dtype)
    return arr
