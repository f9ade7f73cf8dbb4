"""The round loop (DESIGN.md, "One round, as data flows").

select -> clock -> place -> train -> report -> defend/aggregate -> evaluate -> callbacks.
The clock runs before training: an update's arrival time depends only on its device profile and
task size, so the round policy decides up front which updates arrive now, which are carried to a
later round and which are dropped; dropped clients are not trained. For a linear rule (FedAvg) the
actors return one partial sum each instead of every row (``execution.preaggregate``).

:class:`Simulation` owns no global state: everything a round needs is derived from the config, the
round index and the state objects it carries (global model, virtual clock, in-flight updates,
algorithm and defense state), which is exactly what a checkpoint stores.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from actors.trainer import TrainTask
from attacks import make_attack
from defenses import DefenseContext, UpdateBatch, Verdict, make_defense, screen_malformed
from defenses.siren_client import CLIENT_SIDE
from simulator.adversary import Adversary, detection
from simulator.algorithms import make_algorithm
from simulator.clock import Arrival, VirtualClock, compute_seconds, make_policy, transfer_seconds
from simulator.config import Config
from simulator.evaluation import ServerEval
from simulator.placement import place
from simulator.rounds import (  # noqa: F401 (re-exported for callers of the engine)
    _ATTACK,
    _CLIENT,
    _DEFENSE,
    _EPOCHS,
    _SELECT,
    AVAILABILITY_PERIOD_S,
    InFlight,
    RoundCallback,
    RoundRecord,
    client_seeds,
    combine_linear,
    make_batch,
    save_checkpoint,
    stream,
)
from simulator.setup import Federation, build_federation, make_executor

log = logging.getLogger("fedsentry")


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
        # cheap validation first: names and parameters fail before data loads or Ray starts
        self.attack = make_attack(cfg.attack.attack, **cfg.attack.attack_params)
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
        self.fed = federation or build_federation(cfg)
        side = CLIENT_SIDE.get(cfg.defense.defense)
        self.client_side = side() if side is not None else None
        if self.client_side is not None:  # holdouts leave training before the actors get data
            train = self.client_side.split(self.fed.client_index, cfg.experiment.seed)
            self.fed = dataclasses.replace(
                self.fed, client_index=train,
                client_sizes=np.array([len(i) for i in train], np.int64))
        self._own_executor = executor is None
        self.executor = executor or make_executor(cfg, self.fed)
        self.spec = self.algorithm.local_spec()
        self.server = ServerEval(self.fed, cfg.experiment.seed, cfg.algorithm.local_epochs,
                                 self.spec)  # the clean spec: built before any data attack
        self.adversary = Adversary(self.attack, cfg.attack, self.fed.num_clients,
                                   cfg.experiment.seed)
        if self.adversary.is_data_attack:
            self.spec = dataclasses.replace(self.spec, data_attack=self.adversary.data_attack,
                                            num_classes=self.fed.dataset.num_classes)
        self.global_flat = self.fed.layout.flatten(self.fed.model).clone()
        self.algo_state = self.algorithm.init_state(self.global_flat)
        self.clock = VirtualClock()
        self.in_flight: list[InFlight] = []
        self.history: dict[int, torch.Tensor] = {}  # round -> global model it started from
        self.next_round = 0
        self.model_bytes = 4 * self.fed.layout.size
        self.flops_per_sample = self.fed.model_spec.train_flops_per_sample()
        self.wall_offset = 0.0
        #: the rows aggregated in the last round (``None`` on the pre-aggregated fast path);
        #: round callbacks such as the ledger read it
        self.round_batch: UpdateBatch | None = None

    # -- one round -------------------------------------------------------------------------
    def select(self, rnd: int) -> np.ndarray:
        """Sample clients among the devices online now and not busy with an earlier update.

        When nobody is online the clock first moves to the moment the next device comes online.
        """
        seed, pop = self.cfg.experiment.seed, self.fed.population
        online = pop.available(self.clock.now, seed=seed)
        if not online.any():
            wait = np.mod(pop.phases(seed=seed) - self.clock.now, AVAILABILITY_PERIOD_S)
            self.clock.advance_to(self.clock.now + float(wait.min()) + 1e-6)
            online = pop.available(self.clock.now, seed=seed)
        busy = np.array([f.arrival.client_id for f in self.in_flight], dtype=np.int64)
        online[busy] = False
        candidates = np.flatnonzero(online)
        m = min(self.cfg.experiment.clients_per_round, len(candidates))
        if m == 0:
            return np.zeros(0, np.int64)
        return np.sort(stream(seed, rnd, _SELECT).choice(candidates, m, replace=False))

    def run_round(self, rnd: int, wall_start: float) -> RoundRecord:
        cfg, seed = self.cfg, self.cfg.experiment.seed
        self.history[rnd] = self.global_flat
        for old in [r for r in self.history if r < rnd - cfg.clock.max_staleness]:
            del self.history[old]
        selected = self.select(rnd)
        mal = self.adversary.malicious(selected, stream(seed, rnd, _ATTACK))
        epochs = self.algorithm.client_epochs(len(selected), stream(seed, rnd, _EPOCHS))
        sizes = self.fed.client_sizes[selected]
        start = self.clock.now
        # clock first: arrival times depend on device profiles and task sizes, not on results
        new = self._arrivals(rnd, selected, epochs, sizes, start)
        outcome = self.policy.close_round(rnd, start, new, [f.arrival for f in self.in_flight])
        now_ids = {a.client_id for a in outcome.arrived if a.base_round == rnd}
        hold_ids = {a.client_id for a in outcome.pending if a.base_round == rnd}
        verdicts: list[Verdict] = []
        if not self.algorithm.keep_partial_work():
            partial = {int(c) for c, e in zip(selected, epochs, strict=True)
                       if e < cfg.algorithm.local_epochs}
            verdicts += [Verdict(c, False, 0.0, float("nan"), "partial-work")
                         for c in sorted(partial & (now_ids | hold_ids))]
            now_ids -= partial
            hold_ids -= partial
        # a model attack needs the rows; so do non-linear rules and the ledger (it stores them)
        fast = (self.defense.linear and cfg.execution.preaggregate
                and not self.adversary.is_model_attack and not cfg.ledger.enabled)
        weights = self.defense.row_weights(sizes) if fast else np.full(len(sizes), -1.0)
        alarms: dict[int, bool] = {}
        starts = None
        if self.client_side is not None:
            alarms = self.client_side.alarms(selected, mal, self.global_flat,
                                             self.server.holdout_accuracy)
            starts = self.client_side.start_models(alarms, mal) or None
        seeds = client_seeds(seed, rnd, selected)
        poison = self.adversary.is_data_attack
        tasks = [TrainTask(int(c), int(e), int(sd), int(n), float(w) if c in now_ids else -1.0,
                           poison and int(c) in mal)
                 for c, e, sd, n, w in zip(selected, epochs, seeds, sizes, weights, strict=True)
                 if c in now_ids or c in hold_ids]
        groups = place(tasks, self.executor.num_workers, cfg.execution.placement,
                       cfg.execution.min_actor_mflop * 1e6 / self.flops_per_sample)
        res = self.executor.run(groups, self.global_flat.numpy(), self.spec,
                                cfg.execution.vectorize, starts)
        info = {int(c): (int(n), float(lo), bool(ok)) for c, n, lo, ok in zip(
            res["client_ids"], res["num_samples"], res["losses"], res["finite"], strict=True)}
        returned = {int(c): InFlight(new[int(np.searchsorted(selected, c))], row,
                                     info[int(c)][0], info[int(c)][1], int(c) in mal,
                                     alarms.get(int(c), False))
                    for c, row in zip(res["row_ids"], res["updates"]
                                      if res["updates"] is not None else [], strict=True)}
        if self.client_side is not None:
            for c, f in returned.items():
                if c not in mal:
                    self.client_side.remember(c, self.global_flat.numpy() + f.row)
        self.adversary.rewrite(rnd, self.global_flat, returned, mal,
                               stream(seed, rnd, _ATTACK + 100))
        arrived_keys = {(a.client_id, a.base_round) for a in outcome.arrived}
        carried = [f for f in self.in_flight
                   if (f.arrival.client_id, f.arrival.base_round) in arrived_keys]
        pending_keys = {(a.client_id, a.base_round) for a in outcome.pending}
        self.in_flight = ([f for f in self.in_flight
                           if (f.arrival.client_id, f.arrival.base_round) in pending_keys]
                          + [returned[c] for c in sorted(hold_ids)])
        losses = [lo for lo in [f.loss for f in carried] + [info[c][1] for c in sorted(now_ids)]
                  if np.isfinite(lo)]
        self.round_batch = None
        if fast:
            delta, vs = combine_linear(self.defense, res, now_ids, info, carried,
                                       self.fed.layout.size)
        else:
            arrived = [returned[c] for c in sorted(now_ids)] + carried
            self.round_batch = make_batch(arrived, self.fed.layout.size)
            delta, vs = self._defend(rnd, self.round_batch)
        verdicts += vs
        arrived_ids = now_ids | {f.arrival.client_id for f in carried}
        mal_arrived = (now_ids & mal) | {f.arrival.client_id for f in carried if f.malicious}
        self.global_flat = self.algorithm.server_update(self.global_flat, delta,
                                                        self.algo_state)
        self.clock.advance_to(max(outcome.round_end, start))
        acc = loss = asr = None
        if (rnd + 1) % cfg.experiment.eval_every == 0 or rnd == cfg.experiment.rounds - 1:
            acc, loss = self._evaluate(self.global_flat)
            asr = self.server.attack_success_rate(self.global_flat, self.adversary.trigger)
        return RoundRecord(
            round=rnd, virtual_time=self.clock.now,
            wall_time=self.wall_offset + time.perf_counter() - wall_start,
            selected=[int(c) for c in selected],
            participants=[v.client_id for v in verdicts if v.kept],
            dropped=[a.client_id for a in outcome.dropped],
            stale=[f.arrival.client_id for f in carried],
            rejected=[v.client_id for v in verdicts if not v.kept],
            verdicts=[v.to_dict() for v in verdicts],
            train_loss=float(np.mean(losses)) if losses else None, accuracy=acc, loss=loss,
            extra={"train_seconds": float(res["seconds"]), "malicious": sorted(mal),
                   "attack_success_rate": asr,
                   "alarms": sorted(c for c, a in alarms.items() if a),
                   "detection": detection(arrived_ids, mal_arrived,
                                          [v.client_id for v in verdicts if not v.kept])})

    def _arrivals(self, rnd: int, selected: np.ndarray, epochs: np.ndarray, sizes: np.ndarray,
                  start: float) -> list[Arrival]:
        """When each selected client's update reaches the server (compute + transfer)."""
        pop, c = self.fed.population, self.cfg.clock
        dur = (compute_seconds(sizes, epochs, pop.compute_ms_per_sample[selected],
                               c.compute_factor)
               + transfer_seconds(self.model_bytes, pop.up_kbps[selected],
                                  pop.down_kbps[selected], pop.latency_ms[selected]))
        dur = np.atleast_1d(np.asarray(dur, dtype=np.float64))
        return [Arrival(int(k), rnd, start + float(d)) for k, d in zip(selected, dur,
                                                                       strict=True)]

    def _defend(self, rnd: int, batch: UpdateBatch) -> tuple[torch.Tensor, list[Verdict]]:
        """Screen malformed rows, then let the defense aggregate the rest."""
        ok, bad = screen_malformed(batch, self.fed.layout.size)
        ctx = DefenseContext(rnd, self.global_flat, self.fed.public_x, self.fed.public_y,
                             self._evaluate, stream(self.cfg.experiment.seed, rnd, _DEFENSE),
                             self.server.score_models if self.fed.public_x is not None else None,
                             self._base_model,
                             functools.partial(self.server.server_update, rnd, self.global_flat)
                             if self.fed.public_x is not None else None)
        result = self.defense(batch.subset(ok), ctx)
        return result.delta, bad + list(result.verdicts)

    def _base_model(self, rnd: int) -> torch.Tensor:
        """The global model that round ``rnd``'s clients trained from."""
        if rnd not in self.history:
            raise KeyError(f"global model of round {rnd} is no longer kept (max_staleness)")
        return self.history[rnd]

    def _evaluate(self, flat: torch.Tensor) -> tuple[float, float]:
        return self.server.test(flat)

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
            "in_flight": [(f.arrival, f.row, f.num_samples, f.loss, f.malicious, f.alarm)
                          for f in self.in_flight],
            "client_side": (self.client_side.state_dict() if self.client_side is not None
                            else None),
            "wall_time": self.wall_offset, "history": dict(self.history),
        }

    def load_state_dict(self, st: dict[str, Any]) -> None:
        self.next_round = int(st["next_round"])
        self.global_flat = st["global"].clone()
        self.clock = VirtualClock()
        self.clock.advance_to(float(st["now"]))
        self.algo_state = st["algo_state"]
        self.defense.load_state_dict(st["defense"])
        self.in_flight = [InFlight(*f) for f in st["in_flight"]]
        self.wall_offset = float(st.get("wall_time", 0.0))
        self.history = dict(st.get("history", {}))
        if self.client_side is not None and st.get("client_side") is not None:
            self.client_side.load_state_dict(st["client_side"])

    def close(self) -> None:
        """Shut down the executor if this simulation created it."""
        if self._own_executor:
            self.executor.shutdown()
