"""Which entries of the flat model are shared (aggregated, defended, recorded) and which stay on
each client (an algorithm's ``local_parameters``: FedBN's BatchNorm, a personal head).

A client's update row holds only the shared entries. Defenses, attacks and the ledger see rows
and models in that shared space; the engine maps between it and the full flat model here. With no
local parameters (the usual case) every map is the identity and costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from simulator.training.flat import FlatLayout


@dataclass(frozen=True)
class ParamSpace:
    """Shared and local entries of a flat model of ``full`` entries.

    Attributes
    ----------
    full : P, entries of the flat model.
    shared, local : index arrays of the shared / local entries, or None when every entry is
        shared (then ``local`` is None too).
    upload : what a row is: ``"update"`` (the shared entries of a model update) or the name of
        what the algorithm sends instead (:attr:`~simulator.algorithms.base.Algorithm.upload`).
    row : entries of a row that is not an update (None for updates).
    """

    full: int
    shared: np.ndarray | None = None
    local: np.ndarray | None = None
    upload: str = "update"
    row: int | None = None

    @classmethod
    def of(cls, layout: FlatLayout, algorithm: Any, public_entries: int = 0) -> ParamSpace:
        """The entries of ``layout`` for ``algorithm``; ``public_entries``: the run's public
        samples times classes (what a row of ``row_entries`` ``"public"`` holds; 0 without a
        public set)."""
        upload = getattr(algorithm, "upload", "update")
        row = algorithm.row_entries(layout) if upload != "update" else None
        if row == "public":
            if public_entries < 1:
                raise ValueError(
                    f"algorithm {algorithm.name!r}: its rows hold predictions on the server's "
                    "public set; the run has none (--public-fraction > 0)"
                )
            row = public_entries
        if row is not None and (not isinstance(row, int) or row < 1):
            raise ValueError(f"algorithm {algorithm.name!r}: row_entries must be >= 1, got {row!r}")
        base = cls._model(layout, algorithm)
        return cls(base.full, base.shared, base.local, upload, row)

    @classmethod
    def _model(cls, layout: FlatLayout, algorithm: Any) -> ParamSpace:
        names = set(algorithm.local_parameters(list(layout.names)))
        unknown = sorted(names - set(layout.names))
        if unknown:
            raise ValueError(
                f"algorithm {algorithm.name!r}: local parameter {unknown[0]!r} is "
                f"not in the model; valid: {layout.names}"
            )
        if not names:
            return cls(layout.size)
        offsets = np.concatenate([[0], np.cumsum(layout.numels)])
        mask = np.zeros(layout.size, bool)
        for i, n in enumerate(layout.names):
            if n in names:
                mask[offsets[i] : offsets[i + 1]] = True
        return cls(layout.size, np.flatnonzero(~mask), np.flatnonzero(mask))

    @property
    def size(self) -> int:
        """Entries of a row: the shared parameters of an update, or :attr:`row`."""
        return self.row if self.row is not None else self.shared_size

    @property
    def shared_size(self) -> int:
        """Entries of the model that are shared (aggregated, not kept on clients)."""
        return self.full if self.shared is None else len(self.shared)

    @property
    def updates(self) -> bool:
        """Whether rows are model updates (the usual case)."""
        return self.upload == "update"

    def shared_of(self, flat: torch.Tensor) -> torch.Tensor:
        """``[P] -> [size]``."""
        return flat if self.shared is None else flat[torch.from_numpy(self.shared)]

    def full_of(self, vec: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
        """A shared-space model as a full model, local entries from ``base``."""
        if self.shared is None:
            return vec
        out = base.clone()
        out[torch.from_numpy(self.shared)] = vec
        return out

    def full_rows(self, rows: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
        """``[K, size]`` shared-space models as ``[K, P]``, local entries from ``base``."""
        if self.shared is None:
            return rows
        out = base.expand(rows.shape[0], -1).clone()
        out[:, torch.from_numpy(self.shared)] = rows
        return out

    def full_delta(self, delta: torch.Tensor) -> torch.Tensor:
        """A shared-space update as a full one (zero at the local entries); the aggregate
        itself when rows are not updates (it lives in the rows' space)."""
        if self.shared is None or not self.updates:
            return delta
        out = torch.zeros(self.full, dtype=delta.dtype)
        out[torch.from_numpy(self.shared)] = delta
        return out
