"""The round loop: select -> place -> train -> report -> clock -> defend/aggregate -> callbacks ->
evaluate (DESIGN.md, "One round, as data flows").

:class:`Simulation` owns no global state: everything a round needs is derived from the config, the
round index and the state objects it carries (global model, virtual clock, in-flight updates,
algorithm and defense state), which is exactly what a checkpoint stores.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from actors.trainer import TrainTask
from defenses import DefenseContext, UpdateBatch, Verdict, make_defense, screen_malformed
from simulator.algorithms import make_algorithm
from simulator.clock import Arrival, VirtualClock, compute_seconds, make_policy, transfer_seconds
from simulator.config import Config
from simulator.placement import place
from simulator.setup import Federation, build_federation, make_executor
from simulator.training import evaluate

log = logging.getLogger("fedsentry")

# independent random streams per round
_SELECT, _EPOCHS, _CLIENT, _DEFENSE = 1, 2, 3, 4


def stream(seed: int, rnd: int, which: int) -> np.random.Generator:
    """The generator of one purpose in one round: a pure function of (seed, round, purpose)."""
    return np.random.default_rng([seed, rnd, which])


def client_seed(seed: int, rnd: int, client: int) -> int:
    return int(np.random.SeedSequence([seed, rnd, _CLIENT, client]).generate_state(1)[0])


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


class Simulation:
    """One federated run.

    Parameters
    ----------
    cfg : the resolved configuration.
    callbacks : round callbacks, called after aggregation and evaluation.
    federation : prebuilt data/devices/model (tests share one); built from ``cfg`` otherwise.
    executor : where training runs; built from ``cfg.execution`` otherwise.
    """

    def __init__(self, cfg: Config, callbacks: Sequence[RoundCallback] = (),
                 federation: Federation | None = None, executor: Any = None) -> None:
        self.cfg = cfg
        self.callbacks = list(callbacks)
        self.fed = federation or build_federation(cfg)
        self.executor = executor or make_executor(cfg, self.fed)
        self.algorithm = make_algorithm(cfg.algorithm)
        self.defense = make_defense(cfg.defense.defense, **cfg.defense.defense_params)
        c = cfg.clock
        params: dict[str, Any] = {}
        if c.round_policy in ("deadline", "deadline_carryover"):
            params["deadline_s"] = c.deadline_s
        if c.round_policy == "deadline_carryover":
            params["max_staleness"] = c.max_staleness
        if c.round_policy == "first_k":
            params["k"] = c.first_k or max(1, int(0.8 * cfg.experiment.clients_per_round))
        self.policy = make_policy(c.round_policy, **params)
        self.spec = self.algorithm.local_spec()
        self.global_flat = self.fed.layout.flatten(self.fed.model).clone()
        self.algo_state = self.algorithm.init_state(self.global_flat)
        self.clock = VirtualClock()
        self.in_flight: list[InFlight] = []
        self.next_round = 0
        self.model_bytes = 4 * self.fed.layout.size
        self.wall_offset = 0.0

    # -- one round -------------------------------------------------------------------------
    def select(self, rnd: int) -> np.ndarray:
        """Sample clients among the devices online at the current virtual time."""
        online = np.flatnonzero(self.fed.population.available(self.clock.now,
                                                               seed=self.cfg.experiment.seed))
        m = min(self.cfg.experiment.clients_per_round, len(online))
        if m == 0:
            return np.zeros(0, np.int64)
        return np.sort(stream(self.cfg.experiment.seed, rnd, _SELECT).choice(online, m,
                                                                            replace=False))

    def run_round(self, rnd: int, wall_start: float) -> RoundRecord:
        cfg, seed = self.cfg, self.cfg.experiment.seed
        selected = self.select(rnd)
        epochs = self.algorithm.client_epochs(len(selected), stream(seed, rnd, _EPOCHS))
        sizes = self.fed.client_sizes[selected]
        tasks = [TrainTask(int(c), int(e), client_seed(seed, rnd, int(c)), int(n))
                 for c, e, n in zip(selected, epochs, sizes, strict=True)]
        groups = place(tasks, self.executor.num_workers, cfg.execution.placement)
        res = self.executor.run(groups, self.global_flat.numpy(), self.spec,
                                cfg.execution.vectorize)
        # clock: when does each update reach the server?
        pop = self.fed.population
        dur = (compute_seconds(sizes, epochs, pop.compute_ms_per_sample[selected],
                               cfg.clock.compute_factor)
               + transfer_seconds(self.model_bytes, pop.up_kbps[selected],
                                  pop.down_kbps[selected], pop.latency_ms[selected]))
        dur = np.atleast_1d(np.asarray(dur, dtype=np.float64))
        start = self.clock.now
        new = [Arrival(int(c), rnd, start + float(d)) for c, d in zip(selected, dur, strict=True)]
        rows = {(int(c), rnd): InFlight(a, res["updates"][i], int(res["num_samples"][i]),
                                        float(res["losses"][i]))
                for i, (c, a) in enumerate(zip(selected, new, strict=True))}
        rows.update({(f.arrival.client_id, f.arrival.base_round): f for f in self.in_flight})
        outcome = self.policy.close_round(rnd, start, new,
                                          [f.arrival for f in self.in_flight])
        self.in_flight = [rows[(a.client_id, a.base_round)] for a in outcome.pending]
        arrived = [rows[(a.client_id, a.base_round)] for a in outcome.arrived]
        verdicts: list[Verdict] = []
        partial = {int(c) for c, e in zip(selected, epochs, strict=True)
                   if e < cfg.algorithm.local_epochs}
        if partial and not self.algorithm.keep_partial_work():
            verdicts += [Verdict(f.arrival.client_id, False, 0.0, float("nan"), "partial-work")
                         for f in arrived if f.arrival.client_id in partial
                         and f.arrival.base_round == rnd]
            arrived = [f for f in arrived if not (f.arrival.client_id in partial
                                                  and f.arrival.base_round == rnd)]
        batch = self._batch(arrived)
        ok, bad = screen_malformed(batch, self.fed.layout.size)
        verdicts += bad
        ctx = DefenseContext(rnd, self.global_flat, self.fed.public_x, self.fed.public_y,
                             self._evaluate, stream(seed, rnd, _DEFENSE))
        result = self.defense(batch.subset(ok), ctx)
        verdicts += list(result.verdicts)
        self.global_flat = self.algorithm.server_update(self.global_flat, result.delta,
                                                        self.algo_state)
        self.clock.advance_to(max(outcome.round_end, start))
        last = rnd == cfg.experiment.rounds - 1
        acc = loss = None
        if (rnd + 1) % cfg.experiment.eval_every == 0 or last:
            acc, loss = self._evaluate(self.global_flat)
        kept = [v.client_id for v in verdicts if v.kept]
        losses = [f.loss for f in arrived]
        return RoundRecord(
            round=rnd, virtual_time=self.clock.now,
            wall_time=self.wall_offset + time.perf_counter() - wall_start,
            selected=[int(c) for c in selected], participants=kept,
            dropped=[a.client_id for a in outcome.dropped],
            stale=[f.arrival.client_id for f in arrived if f.arrival.base_round < rnd],
            rejected=[v.client_id for v in verdicts if not v.kept],
            verdicts=[v.to_dict() for v in verdicts],
            train_loss=float(np.mean(losses)) if losses else None, accuracy=acc, loss=loss)

    def _batch(self, arrived: list[InFlight]) -> UpdateBatch:
        p = self.fed.layout.size
        upd = (torch.from_numpy(np.stack([f.row for f in arrived])) if arrived
               else torch.zeros(0, p))
        return UpdateBatch(
            upd, np.array([f.arrival.client_id for f in arrived], np.int64),
            np.array([f.num_samples for f in arrived], np.int64),
            np.array([f.arrival.base_round for f in arrived], np.int64),
            {"loss": np.array([f.loss for f in arrived], np.float32)})

    def _evaluate(self, flat: torch.Tensor) -> tuple[float, float]:
        return evaluate(self.fed.model, self.fed.layout, flat, self.fed.test_x, self.fed.test_y)

    # -- whole run -------------------------------------------------------------------------
    def run(self, progress: bool = False, on_record: Any = None) -> list[RoundRecord]:
        """Run the remaining rounds; ``on_record(record)`` is called after each one."""
        from tqdm import tqdm

        records = []
        wall_start = time.perf_counter()
        rng = range(self.next_round, self.cfg.experiment.rounds)
        bar = tqdm(rng, desc="rounds", unit="round", disable=not progress, leave=False)
        for rnd in bar:
            rec = self.run_round(rnd, wall_start)
            self.next_round = rnd + 1
            for cb in self.callbacks:
                cb.on_round_end(self, rec)
            if on_record is not None:
                on_record(rec)
            records.append(rec)
            if rec.accuracy is not None:
                bar.set_postfix(acc=f"{rec.accuracy:.3f}")
        bar.close()
        return records

    # -- checkpoint state ------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "next_round": self.next_round, "global": self.global_flat.clone(),
            "now": self.clock.now, "algo_state": self.algo_state,
            "defense": self.defense.state_dict(),
            "in_flight": [(f.arrival, f.row, f.num_samples, f.loss) for f in self.in_flight],
            "wall_time": self.wall_offset,
        }

    def load_state_dict(self, st: dict[str, Any]) -> None:
        self.next_round = int(st["next_round"])
        self.global_flat = st["global"].clone()
        self.clock = VirtualClock()
        self.clock.advance_to(float(st["now"]))
        self.algo_state = st["algo_state"]
        self.defense.load_state_dict(st["defense"])
        self.in_flight = [InFlight(a, r, n, lo) for a, r, n, lo in st["in_flight"]]
        self.wall_offset = float(st.get("wall_time", 0.0))

    def close(self) -> None:
        self.executor.shutdown()


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
