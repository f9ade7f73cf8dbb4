"""Virtual time: compute and transfer costs, round policies and a monotone clock.

Nothing sleeps.  A round policy turns the finish times of in-flight updates into a
:class:`RoundOutcome`: what the server aggregates, drops or keeps waiting for.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import MISSING, dataclass, fields
from numbers import Integral, Real
from typing import Protocol

import numpy as np

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


def compute_seconds(samples: ArrayLike, epochs: ArrayLike, ms_per_sample: ArrayLike,
                    factor: float = 3.0) -> np.ndarray | float:
    """Local training time ``factor * samples * epochs * ms_per_sample / 1000`` seconds.

    ``factor`` (default 3: forward plus a backward pass costing twice as much) scales the
    per-sample forward cost to a training step.  Arguments broadcast as numpy arrays; a
    float is returned when all of them are scalars.
    """
    f = _array("factor", factor, positive=True)
    return _result(compute_seconds_unchecked(_array("samples", samples),
                                             _array("epochs", epochs),
                                             _array("ms_per_sample", ms_per_sample), f))


def compute_seconds_unchecked(samples: np.ndarray, epochs: np.ndarray,
                              ms_per_sample: np.ndarray, factor: float | np.ndarray
                              ) -> np.ndarray:
    """:func:`compute_seconds` of valid float64 arrays, without the checks (the engine's
    per-round path: the population was validated when it was built)."""
    return factor * samples * epochs * ms_per_sample / 1000.0


def transfer_seconds(model_bytes: ArrayLike, up_kbps: ArrayLike, down_kbps: ArrayLike,
                     latency_ms: ArrayLike) -> np.ndarray | float:
    """Time to download then upload a model of ``model_bytes`` bytes, in seconds.

    ``kbit / down_kbps + kbit / up_kbps + 2 * latency_ms / 1000`` with
    ``kbit = model_bytes * 8 / 1000`` (one latency per transfer).  Broadcasts like
    :func:`compute_seconds`.
    """
    return _result(transfer_seconds_unchecked(
        _array("model_bytes", model_bytes), _array("up_kbps", up_kbps, positive=True),
        _array("down_kbps", down_kbps, positive=True), _array("latency_ms", latency_ms)))


def transfer_seconds_unchecked(model_bytes: float | np.ndarray, up_kbps: np.ndarray,
                               down_kbps: np.ndarray, latency_ms: np.ndarray) -> np.ndarray:
    """:func:`transfer_seconds` of valid float64 arrays, without the checks."""
    kbit = model_bytes * 8.0 / 1000.0
    return kbit / down_kbps + kbit / up_kbps + 2.0 * latency_ms / 1000.0


@dataclass(frozen=True)
class Arrival:
    """One client's update in flight."""

    client_id: int
    base_round: int      # >= 0, the round whose global model it was trained from
    finish_time: float   # absolute virtual time at which it reaches the server

    def __post_init__(self) -> None:
        if not math.isfinite(self.finish_time):
            raise ValueError(f"finish_time must be finite, got {self.finish_time!r}")
        if self.base_round < 0:
            raise ValueError(f"base_round must be >= 0, got {self.base_round!r}")

    def sort_key(self) -> tuple[float, int, int]:
        """Deterministic order: ``(finish_time, client_id, base_round)``."""
        return (self.finish_time, self.client_id, self.base_round)


def _ordered(arrivals: Iterable[Arrival]) -> tuple[Arrival, ...]:
    return tuple(sorted(arrivals, key=Arrival.sort_key))


def arrivals_from_durations(client_ids: Sequence[int], durations: ArrayLike, *,
                            round_idx: int, round_start: float) -> tuple[Arrival, ...]:
    """Arrivals for clients that start training from round ``round_idx`` at ``round_start``.

    ``durations[j]`` is client ``client_ids[j]``'s finish time in seconds after the start.
    """
    d = np.atleast_1d(_array("durations", durations))
    if d.shape != (len(client_ids),):
        raise ValueError(f"durations has shape {d.shape}, expected ({len(client_ids)},)")
    return tuple(Arrival(int(c), round_idx, round_start + float(x))
                 for c, x in zip(client_ids, d, strict=True))


@dataclass(frozen=True)
class RoundOutcome:
    """What happened at the end of a round; each tuple sorted by :meth:`Arrival.sort_key`.

    Attributes
    ----------
    round_end : float
        Absolute virtual time at which the server aggregates.
    arrived : tuple of Arrival
        Aggregated this round; carried updates have ``base_round < round_idx``.
    dropped : tuple of Arrival
        Discarded: too late, beyond the first ``k``, or too stale.
    pending : tuple of Arrival
        Still in flight, to be passed to the next round (carry-over policy only).
    """

    round_end: float
    arrived: tuple[Arrival, ...]
    dropped: tuple[Arrival, ...] = ()
    pending: tuple[Arrival, ...] = ()


class RoundPolicy(Protocol):
    """Decides when a round ends and what happens to every update in flight."""

    def close_round(self, round_idx: int, round_start: float, new: Sequence[Arrival],
                    pending: Sequence[Arrival]) -> RoundOutcome:
        """Close round ``round_idx`` started at ``round_start``.

        ``new`` are the updates of clients selected this round, ``pending`` those
        carried from earlier rounds (empty unless the policy carries updates over;
        other policies treat them exactly like ``new``).
        """
        ...


def _in_flight(round_idx: int, round_start: float, new: Sequence[Arrival],
               pending: Sequence[Arrival]) -> tuple[Arrival, ...]:
    if not math.isfinite(round_start):
        raise ValueError(f"round_start must be finite, got {round_start!r}")
    every = _ordered([*new, *pending])
    for a in every:
        if a.base_round > round_idx:
            raise ValueError(f"{a} was trained from a later round than {round_idx}")
    return every


def _last_finish(round_start: float, arrivals: Sequence[Arrival]) -> float:
    """When the last of ``arrivals`` lands (never before ``round_start``)."""
    return max([round_start, *(a.finish_time for a in arrivals)])


def _check_deadline(deadline_s: float) -> None:
    if isinstance(deadline_s, bool) or not isinstance(deadline_s, Real) \
            or not math.isfinite(deadline_s) or deadline_s <= 0:
        raise ValueError(f"deadline_s must be a finite number > 0, got {deadline_s!r}")


def _check_int(name: str, value: int, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")


@dataclass(frozen=True)
class WaitForAll:
    """Synchronous FedAvg: all updates arrive; the round ends when the last one lands."""

    def close_round(self, round_idx: int, round_start: float, new: Sequence[Arrival],
                    pending: Sequence[Arrival]) -> RoundOutcome:
        every = _in_flight(round_idx, round_start, new, pending)
        return RoundOutcome(_last_finish(round_start, every), every)


@dataclass(frozen=True)
class Deadline:
    """The round ends at ``min(round_start + deadline_s, last finish time)``.

    Ending early when every update has landed is what a server that knows its
    selected clients would do.  Updates landing after the deadline are dropped;
    landing exactly at the deadline counts as arrived.
    """

    deadline_s: float

    def __post_init__(self) -> None:
        _check_deadline(self.deadline_s)

    def close_round(self, round_idx: int, round_start: float, new: Sequence[Arrival],
                    pending: Sequence[Arrival]) -> RoundOutcome:
        every = _in_flight(round_idx, round_start, new, pending)
        end = min(round_start + self.deadline_s, _last_finish(round_start, every))
        return RoundOutcome(end, tuple(a for a in every if a.finish_time <= end),
                            tuple(a for a in every if a.finish_time > end))


@dataclass(frozen=True)
class DeadlineCarryover:
    """Deadline rounds whose late updates are kept and aggregated, stale, in a later round.

    Staleness of an update aggregated in round ``r`` is ``r - base_round``.  Updates
    that could only be used with staleness above ``max_staleness`` are dropped as
    soon as that is certain: already too stale now, or late and too stale next round.
    The round ends at ``min(round_start + deadline_s, last finish)`` over the usable
    updates; those landed by then arrive, the others stay pending and keep their
    ``base_round``.  Feed ``outcome.pending`` to the next round's ``close_round``: a
    pending update arrives in the first round whose end is >= its finish time.
    ``max_staleness=0`` behaves like :class:`Deadline`.
    """

    deadline_s: float
    max_staleness: int = 5

    def __post_init__(self) -> None:
        _check_deadline(self.deadline_s)
        _check_int("max_staleness", self.max_staleness, 0)

    def close_round(self, round_idx: int, round_start: float, new: Sequence[Arrival],
                    pending: Sequence[Arrival]) -> RoundOutcome:
        every = _in_flight(round_idx, round_start, new, pending)
        usable = [a for a in every if round_idx - a.base_round <= self.max_staleness]
        end = min(round_start + self.deadline_s, _last_finish(round_start, usable))
        arrived: list[Arrival] = []
        dropped: list[Arrival] = []
        keep: list[Arrival] = []
        for a in every:
            if round_idx - a.base_round > self.max_staleness:
                dropped.append(a)
            elif a.finish_time <= end:
                arrived.append(a)
            elif round_idx + 1 - a.base_round <= self.max_staleness:
                keep.append(a)
            else:
                dropped.append(a)
        return RoundOutcome(end, tuple(arrived), tuple(dropped), tuple(keep))


@dataclass(frozen=True)
class FirstK:
    """Over-commit: the round ends when the ``k``-th earliest update lands.

    The first ``k`` by ``(finish_time, client_id)`` arrive and the rest are dropped;
    with fewer than ``k`` in flight the round waits for all of them.
    """

    k: int

    def __post_init__(self) -> None:
        _check_int("k", self.k, 1)

    def close_round(self, round_idx: int, round_start: float, new: Sequence[Arrival],
                    pending: Sequence[Arrival]) -> RoundOutcome:
        every = _in_flight(round_idx, round_start, new, pending)
        first = every[: self.k]
        return RoundOutcome(_last_finish(round_start, first), first, every[self.k:])


POLICIES: dict[str, type] = {
    "wait_for_all": WaitForAll,
    "deadline": Deadline,
    "deadline_carryover": DeadlineCarryover,
    "first_k": FirstK,
}


def make_policy(name: str, **params: object) -> RoundPolicy:
    """Build the round policy registered as ``name`` in :data:`POLICIES`.

    Raises
    ------
    ValueError
        Unknown name (lists the valid ones), unknown or missing parameter (lists the
        policy's parameters), or an invalid value (names the field).
    """
    if name not in POLICIES:
        raise ValueError(f"unknown round policy {name!r}; valid: {sorted(POLICIES)}")
    cls = POLICIES[name]
    valid = [f.name for f in fields(cls)]
    unknown = sorted(set(params) - set(valid))
    required = [f.name for f in fields(cls) if f.default is MISSING]
    missing = [p for p in required if p not in params]
    if unknown or missing:
        raise ValueError(f"round policy {name!r}: unknown parameters {unknown}, missing "
                         f"{missing}; valid parameters: {valid}")
    return cls(**params)


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
