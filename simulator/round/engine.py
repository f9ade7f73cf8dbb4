"""The round loop (DESIGN.md, "One round, as data flows").

A round reads as plan -> train -> collect -> aggregate -> record:

1. **plan** (:mod:`simulator.round.plan`): clients, malicious ones, local work, arrival times on the
   virtual clock and the round policy's decision, aggregation weights of a linear rule;
2. **train** and 3. **collect** (:mod:`simulator.round.collect`): actors (or the driver, for a
round too
   small to pay for a Ray call) run the algorithm's client step; new client state goes to the
   store, rows and named extras come back, a model attack rewrites the malicious rows;
4. **aggregate**: one screening of malformed rows, the defense's aggregate and verdicts (or the
   actors' partial sums of a linear rule), then the algorithm's server update;
5. **record** (:mod:`simulator.round.record`): evaluation and the round record; side effects
   (ledger, checkpoints, logs) hang on the callbacks that :meth:`Simulation.run` calls.

:class:`Simulation` owns no global state: everything a round needs is derived from the config, the
round index and the state it carries (global model, virtual clock, in-flight updates, server and
defense state, the client-state store), which is exactly what a checkpoint stores.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from actors.merge import ROWS as MERGED
from attacks import make_attack
from defenses import make_defense
from simulator.algorithms import make_algorithm
from simulator.config.plugins import policy_of
from simulator.config.sections import Config
from simulator.population.clock import VirtualClock
from simulator.round.adversary import Adversary
from simulator.round.aggregate import aggregate_round, server_step
from simulator.round.checkpoint import Checkpointed
from simulator.round.collect import ORDERED, gather, settle, train
from simulator.round.parts import (
    check_cohort,
    check_upload,
    group_spaces,
    make_scheduler,
    make_store,
)
from simulator.round.plan import make_plan, plan_tasks
from simulator.round.record import make_record
from simulator.round.server import ServerSide
from simulator.round.types import InFlight, RoundCallback, RoundRecord
from simulator.round.views import RunViews
from simulator.round.workers import Workers
from simulator.run.executor import make_executor
from simulator.run.federation import Federation, build_federation
from simulator.training.evaluation import ClientEval
from simulator.training.groups import train_flops

log = logging.getLogger("fedsentry")


class Simulation(Checkpointed, RunViews):
    """One federated run.

    Parameters
    ----------
    cfg : the resolved configuration.
    callbacks : round callbacks (see :class:`simulator.round.types.RoundCallback`).
    federation : prebuilt data/devices/model (tests share one); built from ``cfg`` otherwise.
    executor : where training runs; built from ``cfg.execution`` otherwise.
    """

    def __init__(
        self,
        cfg: Config,
        callbacks: Sequence[RoundCallback] = (),
        federation: Federation | None = None,
        executor: Any = None,
    ) -> None:
        self.cfg = cfg
        self.callbacks = list(callbacks)
        self._hooks: dict[str, list[Any]] = {}
        # cheap validation first: names and parameters fail before data loads or Ray starts
        self.attack = make_attack(cfg.attack.attack, **cfg.attack.attack_params)
        self.algorithm = make_algorithm(cfg.algorithm)
        self.defense = make_defense(cfg.defense.defense, **cfg.defense.defense_params)
        self.policy = policy_of(cfg.clock, cfg.experiment.clients_per_round)
        check_cohort(self.defense, cfg.experiment.clients_per_round, self.policy)
        check_upload(self.algorithm, self.defense, self.attack, self.policy)
        self.fed = federation or build_federation(cfg)
        side = ServerSide.of(cfg, self.fed, self.algorithm, self.defense)
        self.space, self.server = side.space, side.evaluation
        self.spec = self.server.spec  # the clean spec: built before any data attack
        self.global_flat, self.server_state = side.global_flat, side.server_state
        self.compression = side.compression  # what the transfers carry (bytes on the wire)
        #: each model group's entries (empty with one group: ``space`` is the model's)
        public = self.fed.public_entries
        self.spaces = group_spaces([g.layout for g in self.fed.groups], self.algorithm, public)
        self.store = make_store(
            cfg, self.algorithm, self.fed.layout, self.space, self.spaces, public
        )
        side = self.defense.client_side
        self.client_side = side() if side is not None else None
        train_clients = self.fed.clients
        if self.client_side is not None:  # holdouts leave training before the actors get data
            train_clients = self.client_side.attach(self)
        self.train_clients = train_clients
        self._own_executor = executor is None
        self.executor = executor or make_executor(cfg, self.fed, train_clients)
        self.client_eval = ClientEval.of(
            cfg, self.fed, self.space, self.store, self.algorithm, self.spaces
        )
        self.adversary = Adversary(
            self.attack,
            cfg.attack,
            self.fed.num_clients,
            cfg.experiment.seed,
            independent=self.policy.asynchronous,
        )
        if self.adversary.is_data_attack:
            self.spec = dataclasses.replace(
                self.spec,
                data_attack=self.adversary.data_attack,
                num_classes=self.fed.dataset.num_classes,
            )
        self.clock = VirtualClock()
        self.in_flight: list[InFlight] = []
        self.history: dict[int, torch.Tensor] = {}  # round -> global model it started from
        self.next_round = 0
        self.flops_per_sample = train_flops(self.fed.groups)
        self.scheduler = make_scheduler(cfg, self.flops_per_sample)
        self.wall_offset = 0.0
        self.workers = Workers(
            cfg,
            self.fed,
            train_clients,
            self.executor,
            self.spec,
            self.space,
            self.flops_per_sample,
            self.spaces,
        )

    # -- helpers the round steps use ---------------------------------------------------------
    def hooks(self, method: str) -> list[Any]:
        """The client side and the callbacks that define ``method``."""
        if method not in self._hooks:
            every = ([self.client_side] if self.client_side is not None else []) + self.callbacks
            self._hooks[method] = [h for h in every if hasattr(h, method)]
        return self._hooks[method]

    def linear_round(self) -> bool:
        """Whether the actors may pre-aggregate the fresh rows (a linear rule whose rows neither
        a model attack nor a hook needs)."""
        return (
            self.defense.linear
            and not self.algorithm.reads_rows
            and self.cfg.execution.preaggregate
            and not self.adversary.is_model_attack
            and not self.policy.adjusts_rows
            and not any(getattr(h, "needs_rows", False) for h in self.hooks("on_round_end"))
        )

    def refused(self, selected: np.ndarray) -> set[int]:
        """The selected clients the callbacks' ``refuse`` take out when the round starts."""
        return set().union(*(h.refuse(self, selected) for h in self.hooks("refuse")))

    # -- one round -----------------------------------------------------------------------------
    def run_round(self, rnd: int, wall_start: float) -> RoundRecord:
        """plan -> train -> collect -> aggregate -> record; each step is a function of the
        round's context and returns what it changed, applied here."""
        self.history[rnd] = self.global_flat
        # past global models: the last --max-staleness rounds (Siren's roll-back reads the
        # previous one) and every round an update in flight was trained from (stale rows are
        # relative to it: defenses and asynchronous mixing read it)
        bases = {f.arrival.base_round for f in self.in_flight}
        low = rnd - self.cfg.clock.max_staleness
        for old in [r for r in self.history if r < low and r not in bases]:
            del self.history[old]
        ctx = self.context()
        # 1. plan (the clock moves to the round's start when nobody was online)
        plan = make_plan(
            ctx,
            rnd,
            self.clock.now,
            self.in_flight,
            self.server_state,
            self.linear_round(),
            self.refused,
        )
        self.clock.advance_to(plan.start)
        for hook in self.hooks("on_plan"):
            hook.on_plan(self, plan)
        plan.tasks = plan_tasks(plan, self.adversary.is_data_attack)
        # 2. train
        executor, where = self.workers.for_plan(plan)
        res = train(ctx, plan, executor, where, self.global_flat, self.server_state)
        # 3. collect
        got = gather(ctx, plan, res)
        for table, ids, rows in got.writes:
            self.store.put(table, ids, rows)
        for hook in self.hooks("on_collect"):
            hook.on_collect(self, plan, got.returned)
        col, self.in_flight = settle(ctx, plan, got, self.in_flight, self.global_flat_shared, where)
        if where == "actors":
            col.placement = self.scheduler.observe(col.chunks)
        # 4. aggregate
        batch, verdicts, delta = aggregate_round(self.server_side, self.policy, plan, col)
        carried = {f.arrival.client_id: f.extras for f in col.carried}
        extras = carried | col.extras
        self.global_flat = server_step(
            self.server_side, rnd, delta, verdicts, [*plan.now, *carried], extras, batch
        )
        self.clock.advance_to(max(plan.outcome.round_end, plan.start))
        # 5. record
        record = make_record(
            ctx,
            plan,
            col,
            batch,
            verdicts,
            self.global_flat,
            self.clock.now,
            lambda: self.wall_offset + time.perf_counter() - wall_start,
        )
        record.extras = extras
        return record

    # -- whole run -----------------------------------------------------------------------------
    def run(self, progress: bool = False, on_record: Any = None) -> list[RoundRecord]:
        """Run the remaining rounds; ``on_record(record)`` is called after each one."""
        from tqdm import tqdm

        records = []
        wall_start = time.perf_counter()
        rng = range(self.next_round, self.cfg.experiment.rounds)
        bar = tqdm(rng, desc="rounds", unit="round", disable=not progress, leave=False)
        limit = self.cfg.experiment.max_virtual_hours * 3600.0
        for rnd in bar:
            if limit and self.clock.now >= limit:
                break
            rec = self.run_round(rnd, wall_start)
            self.next_round = rnd + 1
            for cb in self.hooks("on_round_end"):
                cb.on_round_end(self, rec)
            if on_record is not None:
                on_record(rec)
            rec.rows, rec.extras = None, {}  # the hooks' (36 MB a round at 1,000 clients)
            records.append(rec)
            if rec.accuracy is not None:
                bar.set_postfix(acc=f"{rec.accuracy:.3f}")
        bar.close()
        return records

    def close(self) -> None:
        """Shut down the executor if this simulation created it; close the store; let go of the
        row buffers its rounds reused."""
        if self._own_executor:
            self.executor.shutdown()
        self.store.close()
        MERGED.clear()
        ORDERED.clear()
