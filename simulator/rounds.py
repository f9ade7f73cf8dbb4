"""Per-round building blocks of the engine: random streams, round records, in-flight updates,
callbacks and checkpoint files."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from defenses import Defense, UpdateBatch, Verdict, screen_malformed
from simulator.clock import Arrival

if TYPE_CHECKING:
    from simulator.engine import Simulation

AVAILABILITY_PERIOD_S = 3600.0  # the cycle of the device availability model (devices.py)

# independent random streams per round
_SELECT, _EPOCHS, _CLIENT, _DEFENSE, _ATTACK = 1, 2, 3, 4, 5


def stream(seed: int, rnd: int, which: int) -> np.random.Generator:
    """The generator of one purpose in one round: a pure function of (seed, round, purpose)."""
    return np.random.default_rng([seed, rnd, which])


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

    def to_event(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "extra"}
        d.update(self.extra)
        return d


class RoundCallback(Protocol):
    """Side effects (ledger, checkpoints, logging) hang here, never inside aggregation."""

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



def save_checkpoint(sim: Simulation, directory: Path, wall_time: float) -> Path:
    """Atomically write ``checkpoint.pt`` (write to a temporary file, then rename)."""
    directory.mkdir(parents=True, exist_ok=True)
    st = sim.state_dict()
    st["wall_time"] = wall_time
    tmp = directory / "checkpoint.pt.tmp"
    torch.save(st, tmp)
    final = directory / "checkpoint.pt"
    tmp.replace(final)
    return final


def combine_linear(defense: Defense, res: dict[str, Any], now_ids: set[int],
                   info: dict[int, tuple[int, float, bool]], carried: list[InFlight],
                   size: int) -> tuple[torch.Tensor, list[Verdict]]:
    """A linear defense's aggregate from actor partial sums plus carried-over rows."""
    cb = make_batch(carried, size)
    ok, bad = screen_malformed(cb, size)
    w_now = {c: float(defense.row_weights(np.array([info[c][0]]))[0])
             for c in sorted(now_ids) if info[c][2]}
    w_old = defense.row_weights(cb.num_samples[ok])
    total = float(res["agg_weight"]) + float(w_old.sum())
    acc = np.zeros(size, np.float64)
    if res["agg_sum"] is not None:
        acc += res["agg_sum"]
    if len(ok):
        acc += w_old @ cb.updates[torch.from_numpy(ok)].numpy().astype(np.float64)
    delta = torch.from_numpy((acc / total if total > 0 else acc).astype(np.float32))
    total = total or 1.0
    vs = [Verdict(c, True, w / total, float("nan")) for c, w in w_now.items()]
    vs += [Verdict(c, False, 0.0, float("nan"), "non-finite")
           for c in sorted(now_ids) if not info[c][2]]
    vs += [Verdict(int(c), True, float(w) / total, float("nan"))
           for c, w in zip(cb.client_ids[ok], w_old, strict=True)]
    return delta, vs + bad


def make_batch(arrived: list[InFlight], size: int) -> UpdateBatch:
    """The update batch of the rows aggregated this round."""
    p = size
    upd = (torch.from_numpy(np.stack([f.row for f in arrived])) if arrived
           else torch.zeros(0, p))
    return UpdateBatch(
        upd, np.array([f.arrival.client_id for f in arrived], np.int64),
        np.array([f.num_samples for f in arrived], np.int64),
        np.array([f.arrival.base_round for f in arrived], np.int64),
        {"loss": np.array([f.loss for f in arrived], np.float32),
         "alarm": np.array([f.alarm for f in arrived], bool)})
