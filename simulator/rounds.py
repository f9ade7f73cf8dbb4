"""Per-round building blocks of the engine: random streams, round records, in-flight updates,
callbacks and checkpoint files."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from defenses import UpdateBatch
from simulator.clock import Arrival

if TYPE_CHECKING:
    from simulator.engine import Simulation

AVAILABILITY_PERIOD_S = 3600.0  # the cycle of the device availability model (devices.py)

# independent random streams per round
_SELECT, _EPOCHS, _CLIENT, _DEFENSE, _ATTACK = 1, 2, 3, 4, 5


class _LazyGenerator:
    """A numpy Generator built on first use: most rounds never draw from most of their streams
    (no straggler epochs, no attack), and seeding one costs ~50 us."""

    __slots__ = ("_g", "_seed")

    def __init__(self, seed: list[int]) -> None:
        self._seed, self._g = seed, None

    def __getattr__(self, name: str) -> Any:
        if self._g is None:
            self._g = np.random.default_rng(self._seed)
        return getattr(self._g, name)


def stream(seed: int, rnd: int, which: int) -> np.random.Generator:
    """The generator of one purpose in one round: a pure function of (seed, round, purpose)
    (created when first drawn from)."""
    return _LazyGenerator([seed, rnd, which])  # type: ignore[return-value]


def client_seeds(seed: int, rnd: int, clients: np.ndarray) -> np.ndarray:
    """Per-client training seeds of one round: a splitmix64 hash of (seed, round, client)."""
    with np.errstate(over="ignore"):
        z = (np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
             + np.uint64(rnd) * np.uint64(0xBF58476D1CE4E5B9)
             + np.asarray(clients, dtype=np.uint64) * np.uint64(0x94D049BB133111EB)
             + np.uint64(_CLIENT))
        for shift, mult in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
            z = (z ^ (z >> np.uint64(shift))) * np.uint64(mult)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(1)).astype(np.int64)


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

    def to_event(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k not in ("extra", "rows")}
        d.update(self.extra)
        return d


class RoundCallback(Protocol):
    """Side effects (ledger, checkpoints, logging) hang here, never inside aggregation.

    A callback may also define ``on_plan(sim, plan)`` (before training: Siren's alarms and start
    models), ``on_collect(sim, plan, returned)`` (after training, before model attacks:
    Siren remembers its clients' local models) and ``needs_rows = True`` (the round must keep
    every update row instead of letting the actors pre-aggregate them: the ledger)."""

    def on_round_end(self, sim: Simulation, record: RoundRecord) -> None: ...


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



def save_checkpoint(sim: Simulation, directory: Path, wall_time: float,
                    **extra: Any) -> Path:
    """Atomically write ``checkpoint.pt`` (write to a temporary file, then rename).

    The client-state store first writes what changed since its last save into
    ``state/checkpoint/``; the manifest it returns goes into ``checkpoint.pt``, whose rename is
    the one commit point (a crash before it leaves the previous checkpoint and its store files
    intact). ``extra`` entries (the run summary) are saved beside the simulation state.
    """
    directory.mkdir(parents=True, exist_ok=True)
    st = sim.state_dict()
    st["store"] = sim.store.save(directory / "state" / "checkpoint")
    st["wall_time"] = wall_time
    st.update(extra)
    tmp = directory / "checkpoint.pt.tmp"
    torch.save(st, tmp)
    final = directory / "checkpoint.pt"
    tmp.replace(final)
    return final
