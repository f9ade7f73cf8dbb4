"""CIFAR-10 python batches: a pickled dict with ``b'data'`` (``[N, 3072]`` uint8, the red, green
and blue 32x32 planes of each image) and ``b'labels'`` (N class ids), Krizhevsky 2009.

Only numpy arrays, numpy scalars and plain containers are unpickled, so a malicious file cannot
run code; the values are checked, never converted: a batch of floats, of values outside 0..255,
of ragged rows, no rows, or labels that are not whole numbers in 0..9 raises :class:`DataError`
naming the file.

References
----------
.. [1] A. Krizhevsky, "Learning Multiple Layers of Features from Tiny Images", 2009.
"""

from __future__ import annotations

import importlib
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from simulator.data.formats import DataError, whole_labels

__all__ = ["ROW_BYTES", "read_cifar_batch", "rows_bound"]

#: bytes of one image in a batch (3 planes of 32x32 uint8): a batch file of S bytes holds at
#: most S // ROW_BYTES images
ROW_BYTES = 3 * 32 * 32

# (module, name) pairs a CIFAR batch pickle may reference; numpy.core was renamed numpy._core.
# ``scalar`` rebuilds one numpy scalar (a label stored as np.int64) from a dtype and its raw
# bytes (numpy's C ``array_scalar``): it calls nothing else, and a dtype holding Python objects
# is refused there unless the object was itself unpickled through this list.
_PICKLE_ALLOWED: set[tuple[str, str]] = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}

# what a corrupt or hostile pickle can raise while it is read (numpy's dtype.__setstate__, which
# every array pickle needs, answers some corrupt states with MemoryError or SystemError)
_UNPICKLE_ERRORS = (
    pickle.UnpicklingError,
    EOFError,
    ValueError,
    TypeError,
    AttributeError,
    IndexError,
    KeyError,
    OverflowError,
    RuntimeError,
    MemoryError,
    SystemError,
)


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


def _pixels(data: Any, path: Path) -> np.ndarray:
    """The batch's ``data`` as ``[N, 3072]`` uint8; DataError naming ``path`` otherwise."""
    try:
        x = np.asarray(data)
    except ValueError as exc:
        raise DataError(f"{path}: data rows are ragged, expected [N, 3072] uint8") from exc
    if x.size == 0:
        raise DataError(f"{path}: batch holds no images (data has shape {x.shape})")
    if x.dtype.kind not in "iu":
        raise DataError(f"{path}: data holds {x.dtype} values, expected uint8 pixels 0..255")
    if x.ndim != 2 or x.shape[1] != ROW_BYTES:
        raise DataError(f"{path}: data has shape {x.shape}, expected [N, 3072]")
    lo, hi = int(x.min()), int(x.max())
    if lo < 0 or hi > 255:
        raise DataError(f"{path}: data values run {lo}..{hi}, expected pixels 0..255")
    return x.astype(np.uint8)


def read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Read one CIFAR-10 python batch: a pickled dict with ``b'data'`` and ``b'labels'``.

    Returns
    -------
    (x, y) : tuple of ndarray
        ``x`` uint8 ``[N, 3, 32, 32]`` and ``y`` int64 ``[N]`` in 0..9.

    Raises
    ------
    DataError
        Naming ``path``: missing, not a batch pickle, a global outside the allow-list, or data
        and labels that are not N rows of 3072 pixels 0..255 and N whole numbers 0..9.
    """
    if not path.is_file():
        raise DataError(f"{path}: CIFAR-10 batch file not found")
    try:
        with path.open("rb") as fh:
            obj = _ArrayOnlyUnpickler(fh, encoding="bytes").load()
    except _UNPICKLE_ERRORS as exc:
        why = str(exc) or type(exc).__name__
        raise DataError(f"{path}: not a valid CIFAR-10 python batch ({why})") from exc
    if not isinstance(obj, dict):
        raise DataError(f"{path}: expected a pickled dict, got {type(obj).__name__}")
    data = obj.get(b"data", obj.get("data"))
    labels = obj.get(b"labels", obj.get("labels"))
    if data is None or labels is None:
        raise DataError(f"{path}: batch lacks b'data' or b'labels' (keys: {list(obj)})")
    x = _pixels(data, path)
    y = whole_labels(labels, str(path), 10)
    if x.shape[0] != y.shape[0]:
        raise DataError(f"{path}: data has {x.shape[0]} images but {y.shape[0]} labels")
    return x.reshape(-1, 3, 32, 32), y


def rows_bound(path: Path) -> int:
    """At most how many images batch ``path`` can hold, from its size alone (a pixel takes at
    least a byte): ``S // 3072`` for a file of S bytes; 0 where there is no such file."""
    try:
        return path.stat().st_size // ROW_BYTES
    except OSError:
        return 0
