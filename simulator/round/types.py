"""The round's data types: the round record, an update in flight, the callback protocol (the
round's random streams are :mod:`simulator.rng`'s)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from defenses import UpdateBatch
from simulator.policies import Arrival


@dataclass
class RoundRecord:
    """Everything one round produced; written as one JSONL event."""

    round: int
    virtual_time: float
    wall_time: float
    selected: list[int]
    participants: list[int]
    dropped: list[int]
    stale: list[int]
    rejected: list[int]
    verdicts: list[dict[str, Any]]
    train_loss: float | None
    accuracy: float | None = None
    loss: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: the rows the defense aggregated (None when the actors pre-aggregated a linear rule); the
    #: ledger records them. Not part of the event.
    rows: UpdateBatch | None = field(default=None, repr=False, compare=False)
    #: client id -> the named extras it sent beside its row (the ledger records them with the
    #: row: the server update may read them). Not part of the event.
    extras: dict[int, dict[str, np.ndarray]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def to_event(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k not in ("extra", "rows", "extras")}
        d.update(self.extra)
        return d


class RoundCallback(Protocol):
    """Side effects (ledger, checkpoints, logging) hang here, never inside aggregation.

    A callback may also define ``refuse(sim, selected) -> set[int]`` (selected clients the
    server refuses when the round starts, before the round policy closes it: Siren's bans),
    ``on_plan(sim, plan)`` (before training: Siren's alarms and start models),
    ``on_collect(sim, plan, returned)`` (after training, before model attacks:
    Siren remembers its clients' local models) and ``needs_rows = True`` (the round must keep
    every update row instead of letting the actors pre-aggregate them: the ledger)."""

    def on_round_end(self, sim: Any, record: RoundRecord) -> None: ...


@dataclass
class InFlight:
    """An update computed but not yet aggregated (carry-over policy)."""

    arrival: Arrival
    row: np.ndarray
    num_samples: int
    loss: float
    malicious: bool = False  # the client was malicious in the round it trained
    alarm: bool = False  # the client raised an alarm (Siren) in the round it trained
    extras: dict[str, np.ndarray] = field(default_factory=dict)  # the client's named extras
