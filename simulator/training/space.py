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
    """

    full: int
    shared: np.ndarray | None = None
    local: np.ndarray | None = None

    @classmethod
    def of(cls, layout: FlatLayout, algorithm: Any) -> ParamSpace:
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
        """Entries of an update row."""
        return self.full if self.shared is None else len(self.shared)

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
        """A shared-space update ``[..., size]`` as a full one ``[..., P]`` (zero at the local
        entries)."""
        if self.shared is None:
            return delta
        out = torch.zeros(*delta.shape[:-1], self.full, dtype=delta.dtype)
        out[..., torch.from_numpy(self.shared)] = delta
        return out
