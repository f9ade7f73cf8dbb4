"""What every round policy shares: updates in flight (:class:`Arrival`), a step's outcome
(:class:`RoundOutcome`), the :class:`RoundPolicy` base class and parameter checks.

A policy answers three questions on the virtual clock (nothing sleeps):

* **how many** clients start training at the beginning of a step (:meth:`RoundPolicy.cohort`:
  the round's cohort, an over-committed one, or a top-up to a concurrency limit);
* **when the step ends and what happens to every update in flight** (:meth:`close_round`:
  aggregated now, kept in flight for a later step, or dropped);
* **how an aggregated row is weighted** (:meth:`adjust_rows`: staleness discounts and
  asynchronous mixing; the identity for synchronous policies).

An asynchronous policy (FedBuff, FedAsync) is one whose step ends on arrival events; a "round" of
the engine is then one server step.

**The clock always moves.** With ``--dropout``, a selected device that goes offline before its
update lands loses it; the server learns of the loss at the instant the device goes offline
(its drop-out instant, between the step's start and when the update would have landed). A step
that nothing else ends (every selected device dropped out and no update is in flight) ends at
the last of its drop-out instants, when the server has heard from its whole cohort; a deadline
policy ends it no later than its deadline (:meth:`RoundPolicy.close_step`,
:meth:`RoundPolicy.lost_end`). The next step starts there, so the devices that dropped out are
offline when it selects, and the run reaches its ``--max-virtual-hours``.

A policy's cohort comes from its parameters; :meth:`RoundPolicy.check_sizes` refuses,
before the run, one larger than the whole population (fewer devices *online* than wanted is
not an error: selection takes those there are).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from typing import TYPE_CHECKING, ClassVar

import numpy as np

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Arrival:
    """One client's update in flight.

    ``compute_s`` is the device-seconds of local training behind it (the wasted-compute
    accounting of straggler studies); it does not take part in ordering or equality.
    """

    client_id: int
    base_round: int  # >= 0, the round whose global model it was trained from
    finish_time: float  # absolute virtual time at which it reaches the server
    compute_s: float = dataclasses.field(default=0.0, compare=False)

    def __post_init__(self) -> None:
        if not math.isfinite(self.finish_time):
            raise ValueError(f"finish_time must be finite, got {self.finish_time!r}")
        if self.base_round < 0:
            raise ValueError(f"base_round must be >= 0, got {self.base_round!r}")

    def sort_key(self) -> tuple[float, int, int]:
        """Deterministic order: ``(finish_time, client_id, base_round)``."""
        return (self.finish_time, self.client_id, self.base_round)


def ordered(arrivals: Iterable[Arrival]) -> tuple[Arrival, ...]:
    """``arrivals`` sorted by :meth:`Arrival.sort_key`."""
    return tuple(sorted(arrivals, key=Arrival.sort_key))


@dataclass(frozen=True)
class RoundOutcome:
    """What happened at the end of a step; each tuple sorted by :meth:`Arrival.sort_key`.

    Attributes
    ----------
    round_end : float
        Absolute virtual time at which the server aggregates.
    arrived : tuple of Arrival
        Aggregated this step; carried updates have ``base_round < round_idx``.
    dropped : tuple of Arrival
        Discarded: too late, beyond the first ``k``, or too stale.
    pending : tuple of Arrival
        Still in flight, passed to the next step (carry-over and asynchronous policies).
    """

    round_end: float
    arrived: tuple[Arrival, ...]
    dropped: tuple[Arrival, ...] = ()
    pending: tuple[Arrival, ...] = ()


@dataclass(frozen=True)
class RoundPolicy:
    """Base class of the registered policies (see the module docstring).

    Subclasses are frozen dataclasses whose fields are the policy's parameters.
    """

    #: the policy steps the server on arrival events instead of rounds
    asynchronous: ClassVar[bool] = False
    #: :meth:`adjust_rows` changes rows, so the actors may not pre-aggregate them
    adjusts_rows: ClassVar[bool] = False

    def resolved(self, clients_per_round: int) -> RoundPolicy:
        """This policy with parameters that default to the cohort size filled in."""
        return self

    def cohort(self, clients_per_round: int, in_flight: int) -> int:
        """How many clients start training at the beginning of a step."""
        return clients_per_round

    def step_rows(self, clients_per_round: int) -> int:
        """The updates a full step aggregates (of the resolved policy): what a defense's
        precondition is checked against before the run starts."""
        return clients_per_round

    def check_sizes(self, clients_per_round: int, num_clients: int) -> None:
        """ValueError naming the parameter when this (unresolved) policy's parameters do not fit
        a cohort of ``clients_per_round`` or ask for more clients at once than the population
        has (``num_clients`` devices); the config's validation calls it."""

    def close_round(
        self, round_idx: int, round_start: float, new: Sequence[Arrival], pending: Sequence[Arrival]
    ) -> RoundOutcome:
        """Close step ``round_idx`` started at ``round_start``.

        ``new`` are the updates of clients that started this step, ``pending`` those kept in
        flight from earlier steps.
        """
        raise NotImplementedError

    def close_step(
        self,
        round_idx: int,
        round_start: float,
        new: Sequence[Arrival],
        pending: Sequence[Arrival],
        lost: Sequence[float] = (),
    ) -> RoundOutcome:
        """:meth:`close_round`, and a step that it ends at its start while some of the step's
        devices dropped out (``lost``: their drop-out instants) ends at :meth:`lost_end`."""
        out = self.close_round(round_idx, round_start, new, pending)
        if not lost or out.round_end > round_start:
            return out
        return dataclasses.replace(out, round_end=self.lost_end(round_start, lost))

    def lost_end(self, round_start: float, lost: Sequence[float]) -> float:
        """When a step that only drop-outs end ends: the last drop-out instant, when the server
        has heard from every device it started (deadline policies: no later than the
        deadline)."""
        return last_drop(round_start, lost)

    def adjust_rows(
        self, rows: torch.Tensor, staleness: np.ndarray, drift: Callable[[], torch.Tensor]
    ) -> torch.Tensor:
        """The rows the defense aggregates, from the clients' rows (``[K, P]``, relative to the
        global model each was trained from) and their staleness; ``drift()`` gives
        ``base_model - current_global`` per row (``[K, P]``) for policies that mix models."""
        return rows


def in_flight(
    round_idx: int, round_start: float, new: Sequence[Arrival], pending: Sequence[Arrival]
) -> tuple[Arrival, ...]:
    """Every update in flight, ordered; rejects a non-finite start or an update from the
    future."""
    if not math.isfinite(round_start):
        raise ValueError(f"round_start must be finite, got {round_start!r}")
    every = ordered([*new, *pending])
    for a in every:
        if a.base_round > round_idx:
            raise ValueError(f"{a} was trained from a later round than {round_idx}")
    return every


def last_finish(round_start: float, arrivals: Sequence[Arrival]) -> float:
    """When the last of ``arrivals`` lands (never before ``round_start``)."""
    return max([round_start, *(a.finish_time for a in arrivals)])


def last_drop(round_start: float, lost: Sequence[float]) -> float:
    """The last of the drop-out instants ``lost`` (never before ``round_start``)."""
    end = max([round_start, *lost])
    if not math.isfinite(end):
        raise ValueError(f"drop-out instants must be finite, got {list(lost)!r}")
    return end


def first_k(
    round_start: float, every: tuple[Arrival, ...], k: int
) -> tuple[float, tuple[Arrival, ...], tuple[Arrival, ...]]:
    """The step that ends when the ``k``-th earliest update lands: (end, first k, the rest);
    with fewer than ``k`` in flight it waits for all of them."""
    first = every[:k]
    return last_finish(round_start, first), first, every[k:]


def close_first_k(
    policy: str,
    k: int,
    round_idx: int,
    round_start: float,
    new: Sequence[Arrival],
    pending: Sequence[Arrival],
    *,
    keep_rest: bool,
) -> RoundOutcome:
    """The step of ``policy`` that aggregates the first ``k`` updates in flight; the rest stay
    pending (``keep_rest``: asynchronous policies) or are dropped."""
    if k < 1:
        raise ValueError(f"round policy {policy!r}: k is 0; resolve it with the cohort size")
    every = in_flight(round_idx, round_start, new, pending)
    end, first, rest = first_k(round_start, every, k)
    return RoundOutcome(end, first, (), rest) if keep_rest else RoundOutcome(end, first, rest)


def check_population(policy: str, what: str, cohort: int, num_clients: int) -> None:
    """ValueError when ``policy`` would start ``cohort`` clients at once (``what`` says which
    parameter asks for them) out of a population of ``num_clients`` devices."""
    if cohort > num_clients:
        raise ValueError(
            f"round policy {policy!r}: {what} exceeds the population "
            f"(data.num_clients={num_clients}); give at most {num_clients}"
        )


def check_positive(
    policy: str,
    name: str,
    value: object,
    *,
    integer: bool = False,
    low: float = 0.0,
    strict: bool = True,
    high: float = math.inf,
) -> None:
    """Require a finite number (an int if ``integer``) > ``low`` (>= if not ``strict``) and
    <= ``high``; ValueError naming the policy and parameter otherwise."""
    kind = Integral if integer else Real
    ok = (
        not isinstance(value, bool)
        and isinstance(value, kind)
        and math.isfinite(float(value))  # type: ignore[arg-type]
        and (value > low if strict else value >= low)
        and value <= high
    )  # type: ignore[operator]
    if not ok:
        what = "an int" if integer else "a finite number"
        rng = f"{'>' if strict else '>='} {low:g}" + (
            f" and <= {high:g}" if high < math.inf else ""
        )
        raise ValueError(f"round policy {policy!r}: {name} must be {what} {rng}, got {value!r}")
