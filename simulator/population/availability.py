"""When devices are online: availability models the round's selection and dropout ask.

Every model answers, vectorized, for virtual time ``t`` (seconds):

* ``online(t)``: bool mask of all N devices online (O(N); the exact selection pass),
* ``online_ids(t, ids)``: the same for ``ids`` only (O(len(ids))),
* ``online_until(t, ids)``: for devices online at ``t`` the absolute time they next go
  offline (``inf`` if never), for devices offline at ``t``, ``t`` itself,
* ``next_online_time(t)``: the first time after ``t`` at which some device is online (used
  when nobody is; may be O(N)); ValueError if no device is ever online.

Two models: :class:`Diurnal` (default; a window per device per cycle, see
:meth:`~simulator.population.devices.Population.available`) and :class:`TraceAvailability` (online
intervals read from a file).  :func:`lost_to_dropout` tells which selected devices go offline
before their update lands.

Availability trace files (``--availability-trace FILE``)
--------------------------------------------------------
One online interval ``[start_s, end_s)`` per row, in seconds within a period that repeats.

CSV: a header ``device_id,start_s,end_s`` (any order, no other columns), then one row per
interval; blank lines and lines starting with ``#`` are skipped::

    device_id,start_s,end_s
    # device 0 is online for the first hour and from 2 h to 2.5 h
    0,0,3600
    0,7200,9000
    1,82800,86400

JSON::

    {"period_s": 86400,
     "devices": [{"device_id": 0, "online": [[0, 3600], [7200, 9000]]},
                 {"device_id": 1, "online": [[82800, 86400]]}]}

The period: the JSON ``period_s`` if given, else ``--availability-period-s`` if > 0, else the
largest ``end_s`` in the file.  A device's intervals must be in time order and must not
overlap; touching ones (``end == next start``) merge, and an interval ending at the period
followed by one starting at 0 keeps the device online across the wrap.  Device ids are ints
>= 0, need not be contiguous, and rows of different devices may interleave.  A JSON device
with an empty ``online`` list is traced but never online.  Errors read ``FILE:LINE: what is
wrong`` for the first bad row (JSON: the line where the device's entry starts).

The population's device ``i`` follows the ``(i mod T)``-th traced device in increasing id
order (``T`` traced devices), so a 1,000-device trace drives a 10^6-device population, the
way FedScale maps its clients onto a smaller availability trace.
"""

from __future__ import annotations

import math
from numbers import Integral
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from simulator.population.availability_trace import load_availability_trace
from simulator.population.checks import check_number, check_seed
from simulator.population.devices import Population, phases_of
from simulator.population.online_intervals import IntervalTrace

#: the cycle of the diurnal availability model, in seconds (a run's default period)
AVAILABILITY_PERIOD_S = 3600.0


@runtime_checkable
class Availability(Protocol):
    """What selection and dropout need to know about when devices are online."""

    def __len__(self) -> int: ...

    def online(self, t: float) -> np.ndarray:
        """Fresh bool mask of all devices online at ``t`` (the caller may modify it)."""
        ...

    def online_ids(self, t: float, ids: np.ndarray) -> np.ndarray:
        """``online(t)[ids]`` in O(len(ids))."""
        ...

    def online_until(self, t: float, ids: np.ndarray) -> np.ndarray:
        """float64 per id: when a device online at ``t`` next goes offline (``inf``: never);
        ``t`` for a device offline at ``t``."""
        ...

    def next_online_time(self, t: float) -> float:
        """The next time after ``t`` a device comes online (ValueError if none ever does)."""
        ...


def _time(t: float) -> float:
    if not math.isfinite(t):
        raise ValueError(f"t must be finite, got {t!r}")
    return float(t)


class Diurnal:
    """Today's diurnal model: device ``i`` is online for one window of
    ``availability[i] * period_s`` per cycle, starting at its seeded phase (wrapping).

    ``online``, ``online_ids`` and ``next_online_time`` are bitwise those of
    :meth:`Population.available`, :meth:`Population.available_ids` and the selection's
    historical next-online rule."""

    def __init__(self, population: Population, seed: int, period_s: float = 3600.0) -> None:
        check_seed(seed)
        check_number("period_s", period_s)
        self.population, self.seed, self.period_s = population, seed, float(period_s)

    def __len__(self) -> int:
        return len(self.population)

    def online(self, t: float) -> np.ndarray:
        return self.population.available(t, seed=self.seed, period_s=self.period_s)

    def online_ids(self, t: float, ids: np.ndarray) -> np.ndarray:
        return self.population.available_ids(t, ids, seed=self.seed, period_s=self.period_s)

    def online_until(self, t: float, ids: np.ndarray) -> np.ndarray:
        """End of the device's current window (``inf`` for availability 1); ``t`` if offline."""
        t, p = _time(t), self.period_s
        ids = np.asarray(ids, dtype=np.int64)
        avail = self.population.availability[ids]
        phase = phases_of(ids.astype(np.uint64), self.seed, p)
        offset = np.mod(t - phase, p)
        window = avail * p
        on = (avail >= 1.0) | (offset < window)
        until = np.where(on, t + (window - offset), t)
        until[avail >= 1.0] = np.inf
        return until

    def next_online_time(self, t: float) -> float:
        wait = np.mod(
            self.population.phases(seed=self.seed, period_s=self.period_s) - t, self.period_s
        )
        return t + float(wait.min()) + 1e-6


class TraceAvailability:
    """Online intervals from a trace that repeats every ``trace.period_s`` seconds.

    Device ``i`` of an ``n``-device population follows traced device ``i mod T`` (FedScale's
    mapping of clients onto a smaller trace).  Each question is one ``np.searchsorted`` over a
    per-device key ``k * M + rank(start)`` (``k`` the traced device, ``rank`` the start's rank
    among all distinct starts): O(len(ids) log I) for ``I`` intervals, no loop per device.
    """

    def __init__(self, n: int, trace: IntervalTrace) -> None:
        if isinstance(n, bool) or not isinstance(n, Integral) or n < 1:
            raise ValueError(f"n must be an int >= 1, got {n!r}")
        if not len(trace.starts):
            raise ValueError("availability trace has no online intervals")
        self.n, self.trace, self.period_s = int(n), trace, trace.period_s
        self._bounds = np.unique(trace.starts)
        self._m = np.int64(len(self._bounds) + 1)
        if len(trace) * int(self._m) >= 2**62:
            raise ValueError("availability trace too large for int64 keys")
        owner = np.repeat(np.arange(len(trace), dtype=np.int64), np.diff(trace.offsets))
        self._keys = owner * self._m + np.searchsorted(self._bounds, trace.starts, "right")

    def __len__(self) -> int:
        return self.n

    def _locate(self, tau: float, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(online, interval index) of traced devices ``k`` at period time ``tau``."""
        r = np.searchsorted(self._bounds, tau, "right")
        j = np.searchsorted(self._keys, k * self._m + r, "right") - 1
        ok = j >= self.trace.offsets[k]
        j = np.where(ok, j, 0)
        return ok & (tau < self.trace.ends[j]), j

    def _tau(self, t: float) -> float:
        tau = float(np.mod(_time(t), self.period_s))
        return tau if tau < self.period_s else 0.0  # -1e-20 mod P rounds to P

    def online(self, t: float) -> np.ndarray:
        traced = min(self.n, len(self.trace))
        on, _ = self._locate(self._tau(t), np.arange(traced, dtype=np.int64))
        return np.resize(on, self.n)  # device i -> traced i mod T

    def online_ids(self, t: float, ids: np.ndarray) -> np.ndarray:
        k = np.asarray(ids, dtype=np.int64) % len(self.trace)
        return self._locate(self._tau(t), k)[0]

    def online_until(self, t: float, ids: np.ndarray) -> np.ndarray:
        tau, p, tr = self._tau(t), self.period_s, self.trace
        k = np.asarray(ids, dtype=np.int64) % len(tr)
        on, j = self._locate(tau, k)
        end = tr.ends[j]
        until = np.where(on, t + (end - tau), t)
        first = np.minimum(tr.offsets[k], len(tr.starts) - 1)
        wraps = on & (end == p) & (tr.starts[first] == 0.0)  # online again at 0 of the next cycle
        until[wraps & (first != j)] = (t + (p - tau) + tr.ends[first])[wraps & (first != j)]
        until[wraps & (first == j)] = np.inf  # online the whole period
        return until

    def next_online_time(self, t: float) -> float:
        """Start of the first interval after ``t`` among the devices the population uses
        (the first time > ``t`` someone is online, when nobody is at ``t``)."""
        t, tau, tr = _time(t), self._tau(t), self.trace
        used = int(tr.offsets[min(self.n, len(tr))])
        if used == 0:
            raise ValueError("no device of the population is ever online in the availability trace")
        starts = tr.starts[:used]
        later = starts > tau
        j = int(
            np.flatnonzero(later)[np.argmin(starts[later])] if later.any() else np.argmin(starts)
        )
        delay = starts[j] - tau if later.any() else starts[j] + self.period_s - tau
        owner = np.array([np.searchsorted(tr.offsets, j, "right") - 1], dtype=np.int64)
        when = max(t + delay, float(np.nextafter(t, np.inf)))
        for _ in range(1000):  # rounding of t + delay: step on
            if self.online_ids(when, owner)[0]:
                break
            when = float(np.nextafter(when, np.inf))
        return when


def make_availability(
    population: Population,
    *,
    seed: int,
    period_s: float,
    trace: str | Path | IntervalTrace | None = None,
    trace_period_s: float = 0.0,
) -> Diurnal | TraceAvailability:
    """The availability model of a run.

    Parameters
    ----------
    population : Population
        The devices (the model answers for ``len(population)`` of them).
    seed, period_s : int, float
        The diurnal model's seed and cycle (used when ``trace`` is None).
    trace : str, Path, IntervalTrace or None
        An availability trace file (or one already loaded): :class:`TraceAvailability`.
    trace_period_s : float
        The trace's period when the file gives none; 0 = its largest ``end_s``.

    Raises
    ------
    TraceError
        A bad trace file (``FILE:LINE: what is wrong``).
    """
    if trace is None:
        return Diurnal(population, seed, period_s)
    if not isinstance(trace, IntervalTrace):
        trace = load_availability_trace(trace, trace_period_s)
    return TraceAvailability(len(population), trace)


def lost_to_dropout(
    avail: Availability, start: float, finish: np.ndarray, ids: np.ndarray
) -> np.ndarray:
    """Which selected devices lose their update by going offline before it lands.

    Parameters
    ----------
    avail : Availability
        The run's availability model.
    start : float
        When the devices were selected (and started).
    finish, ids : arrays of the same shape
        ``finish[j]``: when device ``ids[j]``'s update would land.

    Returns
    -------
    np.ndarray
        bool, ``finish > avail.online_until(start, ids)``: a device offline at ``start`` loses
        any update that takes time.
    """
    finish = np.asarray(finish, dtype=np.float64)
    ids = np.asarray(ids, dtype=np.int64)
    if finish.shape != ids.shape:
        raise ValueError(f"finish {finish.shape} and ids {ids.shape} must have the same shape")
    return finish > avail.online_until(start, ids)
