"""Step 1 of a round, the plan: who trains, when their updates arrive, how they are aggregated.

Everything here is decided before any training runs: the clients (among devices online and idle
now), the malicious ones, each client's local work, the virtual clock's arrival times and the
round policy's verdict on them (arrive now, later, or never), and, for a linear rule whose rows
nobody needs, each client's aggregation weight, computed once here and used both by the actors'
partial sums and by the verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from actors.trainer import TrainTask
from defenses import Verdict
from simulator.clock import (
    Arrival,
    RoundOutcome,
    compute_seconds_unchecked,
    transfer_seconds_unchecked,
)
from simulator.rounds import (
    _ATTACK,
    _EPOCHS,
    _SELECT,
    AVAILABILITY_PERIOD_S,
    client_seeds,
    stream,
)
from simulator.selection import next_online_time, select_clients

if TYPE_CHECKING:
    from simulator.engine import Simulation


@dataclass
class RoundPlan:
    """What a round will do, decided before training.

    Attributes
    ----------
    round, start : round index and the virtual time it starts at.
    selected : sorted ids of the clients selected this round.
    malicious : the selected clients that are malicious this round.
    epochs, sizes, seeds : per selected client (aligned with ``selected``).
    arrivals : when each selected client's update would reach the server.
    outcome : the round policy's decision over new and carried updates.
    now, hold : selected clients trained now whose update arrives this round / later.
    verdicts : rejections decided before training (partial work under ``drop_stragglers``).
    linear : the actors pre-aggregate this round's fresh rows (a linear rule, rows not needed).
    weights : client -> aggregation weight of a linear rule (fresh rows arriving now).
    starts : client -> ``[P]`` start model for clients that do not start from the global one.
    alarms : client -> whether it raised an alarm (Siren's client side).
    tasks : the training tasks (``now`` and ``hold`` clients, in selection order).
    """

    round: int
    start: float
    selected: np.ndarray
    malicious: set[int]
    epochs: np.ndarray
    sizes: np.ndarray
    seeds: np.ndarray
    arrivals: list[Arrival]
    outcome: RoundOutcome
    now: set[int]
    hold: set[int]
    verdicts: list[Verdict]
    linear: bool
    weights: dict[int, float] = field(default_factory=dict)
    starts: dict[int, np.ndarray] = field(default_factory=dict)
    alarms: dict[int, bool] = field(default_factory=dict)
    tasks: list[TrainTask] = field(default_factory=list)

    @property
    def trained(self) -> np.ndarray:
        """Ids of the clients that train this round, in task order."""
        return np.array([t.client_id for t in self.tasks], dtype=np.int64)


def select(sim: Simulation, rnd: int) -> np.ndarray:
    """Clients among the devices online now and not busy with an earlier update; when nobody is
    online the clock first moves to the moment the next device comes online."""
    seed, pop = sim.cfg.experiment.seed, sim.fed.population
    m = sim.cfg.experiment.clients_per_round
    busy = np.array([f.arrival.client_id for f in sim.in_flight], dtype=np.int64)
    kw = {"seed": seed, "period_s": AVAILABILITY_PERIOD_S}
    rng = stream(seed, rnd, _SELECT)
    chosen = select_clients(pop, sim.clock.now, m, busy, rng, **kw)
    if len(chosen) == 0 and not pop.available(sim.clock.now, **kw).any():
        sim.clock.advance_to(next_online_time(pop, sim.clock.now, **kw))
        chosen = select_clients(pop, sim.clock.now, m, busy, rng, **kw)
    return chosen


def arrivals(sim: Simulation, rnd: int, selected: np.ndarray, epochs: np.ndarray,
             sizes: np.ndarray, start: float) -> list[Arrival]:
    """When each selected client's update reaches the server (compute + transfer)."""
    pop, c = sim.fed.population, sim.cfg.clock
    # the population's arrays were validated when it was built; sizes and epochs are counts
    dur = (compute_seconds_unchecked(np.asarray(sizes, np.float64), np.asarray(epochs, np.float64),
                                     pop.compute_ms_per_sample[selected],
                                     np.float64(c.compute_factor))
           + transfer_seconds_unchecked(np.float64(sim.model_bytes), pop.up_kbps[selected],
                                        pop.down_kbps[selected], pop.latency_ms[selected]))
    return [Arrival(int(k), rnd, start + float(d))
            for k, d in zip(selected.tolist(), dur.tolist(), strict=True)]


def make_plan(sim: Simulation, rnd: int) -> RoundPlan:
    """Plan round ``rnd`` (see :class:`RoundPlan`); calls the hooks' ``on_plan``."""
    cfg, seed = sim.cfg, sim.cfg.experiment.seed
    selected = select(sim, rnd)
    mal = sim.adversary.malicious(selected, stream(seed, rnd, _ATTACK))
    epochs = sim.algorithm.client_epochs(len(selected), stream(seed, rnd, _EPOCHS))
    sizes = sim.train_clients.sizes(selected)
    start = sim.clock.now
    new = arrivals(sim, rnd, selected, epochs, sizes, start)
    verdicts: list[Verdict] = []
    if not sim.algorithm.keep_partial_work():
        # partial-work clients are rejected before the round closes: the server neither waits
        # for them nor trains them (the FedAvg baseline of the FedProx paper)
        part = epochs < cfg.algorithm.local_epochs
        verdicts = [Verdict(int(c), False, 0.0, float("nan"), "partial-work")
                    for c in selected[part].tolist()]
        new = [a for a, p in zip(new, part.tolist(), strict=True) if not p]
    outcome = sim.policy.close_round(rnd, start, new, [f.arrival for f in sim.in_flight])
    now = {a.client_id for a in outcome.arrived if a.base_round == rnd}
    hold = {a.client_id for a in outcome.pending if a.base_round == rnd}
    plan = RoundPlan(rnd, start, selected, mal, epochs, sizes,
                     client_seeds(seed, rnd, selected), new, outcome, now, hold, verdicts,
                     sim.linear_round())
    if plan.linear:
        fresh = [i for i, c in enumerate(selected.tolist()) if c in now]
        w = sim.defense.row_weights(sizes[fresh])
        plan.weights = {int(selected[i]): float(x) for i, x in zip(fresh, w, strict=True)}
    for hook in sim.hooks("on_plan"):
        hook.on_plan(sim, plan)
    poison = sim.adversary.is_data_attack
    plan.tasks = [TrainTask(int(c), int(e), int(sd), int(n), poison and int(c) in mal)
                  for c, e, sd, n in zip(selected.tolist(), epochs.tolist(),
                                         plan.seeds.tolist(), sizes.tolist(), strict=True)
                  if c in now or c in hold]
    return plan
