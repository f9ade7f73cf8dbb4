"""Virtual time: compute and transfer costs and a monotone clock.

Nothing sleeps. The round policies that turn the finish times of in-flight updates into a
:class:`~simulator.policies.RoundOutcome` live one file each in :mod:`simulator.policies`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simulator.policies import Arrival

ArrayLike = np.ndarray | float | int


def _array(name: str, value: ArrayLike, *, positive: bool = False) -> np.ndarray:
    """``value`` as a float64 array; ValueError naming ``name`` unless finite and >= 0 (> 0)."""
    arr = np.asarray(value, dtype=np.float64)
    ok = np.isfinite(arr) & (arr > 0 if positive else arr >= 0)
    if not ok.all():
        bad = arr[~ok].ravel()[0]
        raise ValueError(f"{name} must be finite and {'>' if positive else '>='} 0, got {bad!r}")
    return arr


def _result(arr: np.ndarray) -> np.ndarray | float:
    return float(arr) if arr.ndim == 0 else arr


def compute_seconds(
    samples: ArrayLike, epochs: ArrayLike, ms_per_sample: ArrayLike, factor: float = 3.0
) -> np.ndarray | float:
    """Local training time ``factor * samples * epochs * ms_per_sample / 1000`` seconds.

    ``factor`` (default 3: forward plus a backward pass costing twice as much) scales the
    per-sample forward cost to a training step.  Arguments broadcast as numpy arrays; a
    float is returned when all of them are scalars.
    """
    f = _array("factor", factor, positive=True)
    return _result(
        compute_seconds_unchecked(
            _array("samples", samples),
            _array("epochs", epochs),
            _array("ms_per_sample", ms_per_sample),
            f,
        )
    )


def compute_seconds_unchecked(
    samples: np.ndarray, epochs: np.ndarray, ms_per_sample: np.ndarray, factor: float | np.ndarray
) -> np.ndarray:
    """:func:`compute_seconds` of valid float64 arrays, without the checks (the engine's
    per-round path: the population was validated when it was built)."""
    return factor * samples * epochs * ms_per_sample / 1000.0


def transfer_seconds(
    download_bytes: ArrayLike,
    upload_bytes: ArrayLike,
    *,
    up_kbps: ArrayLike,
    down_kbps: ArrayLike,
    latency_ms: ArrayLike,
) -> np.ndarray | float:
    """Time to download ``download_bytes`` then upload ``upload_bytes``, in seconds.

    ``8 * download_bytes / 1000 / down_kbps + 8 * upload_bytes / 1000 / up_kbps + 2 *
    latency_ms / 1000`` (one latency per transfer). The two sizes differ when a transfer is
    compressed (:mod:`simulator.compression`) or when an algorithm sends and receives different
    things (:meth:`simulator.algorithms.base.Algorithm.wire_bytes`); every argument may be a
    per-client array. Broadcasts like :func:`compute_seconds`.
    """
    return _result(
        transfer_seconds_unchecked(
            _array("download_bytes", download_bytes),
            _array("upload_bytes", upload_bytes),
            up_kbps=_array("up_kbps", up_kbps, positive=True),
            down_kbps=_array("down_kbps", down_kbps, positive=True),
            latency_ms=_array("latency_ms", latency_ms),
        )
    )


def transfer_seconds_unchecked(
    download_bytes: float | np.ndarray,
    upload_bytes: float | np.ndarray,
    *,
    up_kbps: np.ndarray,
    down_kbps: np.ndarray,
    latency_ms: np.ndarray,
) -> np.ndarray:
    """:func:`transfer_seconds` of valid float64 arrays, without the checks."""
    down_kbit = download_bytes * 8.0 / 1000.0
    up_kbit = upload_bytes * 8.0 / 1000.0
    return down_kbit / down_kbps + up_kbit / up_kbps + 2.0 * latency_ms / 1000.0


def arrivals_from_durations(
    client_ids: Sequence[int], durations: ArrayLike, *, round_idx: int, round_start: float
) -> tuple[Arrival, ...]:
    """Arrivals for clients that start training from round ``round_idx`` at ``round_start``.

    ``durations[j]`` is client ``client_ids[j]``'s finish time in seconds after the start.
    """
    d = np.atleast_1d(_array("durations", durations))
    if d.shape != (len(client_ids),):
        raise ValueError(f"durations has shape {d.shape}, expected ({len(client_ids)},)")
    return tuple(
        Arrival(int(c), round_idx, round_start + float(x))
        for c, x in zip(client_ids, d, strict=True)
    )


@dataclass
class VirtualClock:
    """Monotone virtual clock in seconds; never sleeps."""

    now: float = 0.0

    def advance_to(self, t: float) -> float:
        """Move to time ``t`` (>= ``now``, finite) and return it."""
        if not math.isfinite(t) or t < self.now:
            raise ValueError(f"cannot move the clock from {self.now} to {t}")
        self.now = float(t)
        return self.now

    def advance_by(self, dt: float) -> float:
        """Move forward by ``dt >= 0`` seconds and return the new time."""
        return self.advance_to(self.now + dt)
