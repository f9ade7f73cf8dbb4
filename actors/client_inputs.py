"""A client's training inputs: its rows of the training set (or of its generated data),
gathered from the population's client data source, after an optional per-client input transform
(feature shift)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.data.clients import ClientData


@dataclass(frozen=True)
class ClientTransform:
    """A per-client input transform applied to a client's gathered rows (feature shift)."""

    seed: int
    strength: float

    def __call__(self, x: np.ndarray, client: int) -> np.ndarray:
        from simulator.data import feature_shift

        return feature_shift(x, client, seed=self.seed, strength=self.strength)


def client_arrays(
    clients: ClientData,
    ids: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    transform: ClientTransform | None = None,
) -> tuple[np.ndarray | None, np.ndarray | None, list[np.ndarray]]:
    """``(pool_x, pool_y, index)`` of clients ``ids``: ``index[k]`` are client k's rows of the
    pool; ``pool_x`` is None when the rows index ``x``/``y`` themselves (no transform, no
    generated data)."""
    r = clients.rows(ids)
    px, py = (r.x, r.y) if r.x is not None else (x, y)
    if transform is None:
        return r.x, r.y, r.index
    parts = [transform(px[rows], int(c)) for c, rows in zip(ids, r.index, strict=True)]
    sizes = np.array([len(p) for p in parts], np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    index = [s + np.arange(n, dtype=np.int64) for s, n in zip(starts, sizes, strict=True)]
    xs = np.concatenate(parts) if parts else px[:0]
    ys = np.concatenate([py[rows] for rows in r.index]) if parts else py[:0]
    return xs.astype(np.float32), ys.astype(np.int64), index
