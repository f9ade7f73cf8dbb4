"""What a compressor is, and what a sparse transfer costs on the wire.

A compressor decides which entries of a transfer travel: of each client's update row on the way
up (:meth:`Compressor.compress_rows`, before the defense, the ledger and the server see the
row) and of the change of the global model on the way down (:meth:`Compressor.downlink`, which
the server applies, so the model every client holds is the server's). It also prices the
transfers before anything trains (:meth:`Compressor.upload_bytes`,
:meth:`Compressor.download_bytes`): the virtual clock's transfer times and the events' byte
counts use those prices. The base class compresses nothing (the ``none`` compressor).

The encoding of a sparse transfer (:func:`sparse_bytes`): ``k`` kept entries of a vector of
``n`` float32 entries whose receiver knows ``n`` cost the cheapest of

* index + value pairs, ``8 k`` bytes (int32 index, float32 value);
* a bitmap + values, ``ceil(n / 8) + 4 k`` bytes (one bit per entry, then the kept values in
  index order);
* the dense vector, ``4 n`` bytes.

The bitmap wins above ``k = n / 32`` (a rate of 1/32), the pairs below it: at a rate of 25%
a sparse row costs ``n / 8 + n`` bytes, 0.28125 of the dense ``4 n``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

#: bytes of one index (int32) and of one value (float32) of a sparse transfer
INDEX_BYTES = 4
VALUE_BYTES = 4


def kept_entries(rate: float, n: np.ndarray | int) -> np.ndarray:
    """``ceil(rate * n)`` for each ``n`` (int64), computed on ``rate * n`` rounded to 6 decimals
    so that float noise cannot add an entry (``0.07 * 100`` is ``7.000000000000001``)."""
    return np.ceil(np.round(rate * np.asarray(n, np.float64), 6)).astype(np.int64)


def sparse_bytes(k: np.ndarray | int, n: np.ndarray | int) -> np.ndarray:
    """Bytes of ``k`` kept float32 entries of ``n`` (see the module docstring), float64."""
    k = np.asarray(k, np.float64)
    n = np.asarray(n, np.float64)
    pairs = (INDEX_BYTES + VALUE_BYTES) * k
    bitmap = np.ceil(n / 8.0) + VALUE_BYTES * k
    return np.minimum(np.minimum(pairs, bitmap), VALUE_BYTES * n)


def split_transfer(dense_bytes: np.ndarray, row_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(entries, rest)`` of a transfer of ``dense_bytes`` bytes: the float32 entries of the
    model vector it carries (at most ``row_size``, the shared model's entries) and the bytes
    of anything else (an algorithm's extras, which a mask leaves dense)."""
    dense = np.asarray(dense_bytes, np.float64)
    entries = np.minimum(np.floor(dense / VALUE_BYTES), row_size).astype(np.int64)
    return entries, dense - VALUE_BYTES * entries


@dataclass(frozen=True)
class Compressor:
    """The identity: every transfer dense (the ``none`` compressor; subclasses override)."""

    name: ClassVar[str] = ""

    @property
    def upload(self) -> bool:
        """Whether client uploads are compressed (then the round keeps every row: the actors
        cannot pre-aggregate rows the driver still has to mask)."""
        return False

    @property
    def download(self) -> bool:
        """Whether the server's downloads are compressed."""
        return False

    def upload_entries(self, dense_bytes: np.ndarray, row_size: int) -> np.ndarray:
        """``[K]`` int64: how many entries of each client's update row it sends."""
        return split_transfer(dense_bytes, row_size)[0]

    def upload_bytes(self, dense_bytes: np.ndarray, row_size: int) -> np.ndarray:
        """``[K]`` bytes each client's upload takes, from its uncompressed size."""
        return np.asarray(dense_bytes, np.float64)

    def download_bytes(
        self, dense_bytes: np.ndarray, row_size: int, holds_previous: np.ndarray
    ) -> np.ndarray:
        """``[K]`` bytes each client's download takes; ``holds_previous[k]``: client k holds
        the previous round's global model (a compressed download is a change to it)."""
        return np.asarray(dense_bytes, np.float64)

    def compress_rows(
        self, rows: torch.Tensor, base: torch.Tensor, keep: torch.Tensor
    ) -> torch.Tensor:
        """``[n, S]`` update rows as sent: ``keep[i]`` entries of row ``i`` (the rest zero);
        ``base`` is the ``[S]`` global model the rows were trained from."""
        return rows

    def downlink(self, old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        """The ``[S]`` global model the server keeps and sends, from the one it had (``old``)
        and the algorithm's server update (``new``)."""
        return new
