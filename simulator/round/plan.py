"""Step 1 of a round, the plan: who trains, when their updates arrive, how they are aggregated.

Everything here is decided before any training runs: the clients (among devices online and idle
now), the malicious ones, each client's local work, its bytes on the wire (what it downloads and
uploads, compressed or not: :mod:`simulator.round.wire`), the virtual clock's arrival times and the
round policy's verdict on them (arrive now, later, or never), and, for a linear rule whose rows
nobody needs, each client's aggregation weight, computed once here and used both by the actors'
partial sums and by the verdicts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from actors.request import TrainTask
from defenses import Verdict
from simulator.policies import Arrival, RoundOutcome
from simulator.population.clock import transfer_seconds_unchecked
from simulator.population.selection import next_online_time, select_clients
from simulator.rng import Stream, client_seeds, stream
from simulator.round.context import RoundContext
from simulator.round.types import InFlight
from simulator.round.wire import WireBytes, plan_wire
from simulator.training.groups import client_train_flops

#: the verdict reason of a client refused when its round starts (``make_plan``'s ``refuse``)
BANNED = "banned"


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
    dropout : selected clients whose device goes offline before their update is uploaded
        (``--dropout``); they neither train nor arrive.
    device_seconds, wasted_seconds : compute device-seconds of the updates resolved this round
        (aggregated, dropped, rejected before training, lost to dropout) and the part of it
        spent on updates that are discarded.
    linear : the actors pre-aggregate this round's fresh rows (a linear rule, rows not needed).
    weights : client -> aggregation weight of a linear rule (fresh rows arriving now).
    starts : client -> ``[P]`` start model for clients that do not start from the global one.
    alarms : client -> whether it raised an alarm (Siren's client side).
    banned : clients whose rows aggregated this round (fresh or carried) the rule is to refuse
        unjudged (Siren's paper rule; its client side sets them from the store); the batch
        carries them as the signal ``"banned"``.
    tasks : the training tasks (``now`` and ``hold`` clients, in selection order).
    wire : each selected client's download and upload bytes (:mod:`simulator.round.wire`).
    writes : client-state rows the plan implies (table, ids, rows; the collect step hands
        them to the engine with the clients' new state): who holds which global model.
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
    dropout: list[int] = field(default_factory=list)
    device_seconds: float = 0.0
    wasted_seconds: float = 0.0
    weights: dict[int, float] = field(default_factory=dict)
    starts: dict[int, np.ndarray] = field(default_factory=dict)
    alarms: dict[int, bool] = field(default_factory=dict)
    banned: set[int] = field(default_factory=set)
    tasks: list[TrainTask] = field(default_factory=list)
    wire: WireBytes | None = None
    writes: list[tuple[str, np.ndarray, np.ndarray]] = field(default_factory=list)

    @property
    def trained(self) -> np.ndarray:
        """Ids of the clients that train this round, in task order."""
        return np.array([t.client_id for t in self.tasks], dtype=np.int64)


def select(
    ctx: RoundContext, rnd: int, now: float, in_flight: list[InFlight], server_state: dict[str, Any]
) -> tuple[np.ndarray, float]:
    """Clients among the devices online at ``now`` and not busy with an earlier update, and the
    time the round starts: when nobody is online, the moment the next device comes online."""
    seed, avail = ctx.cfg.experiment.seed, ctx.fed.availability
    m = ctx.policy.cohort(ctx.cfg.experiment.clients_per_round, len(in_flight))
    busy = np.array([f.arrival.client_id for f in in_flight], dtype=np.int64)
    rng = stream(seed, rnd, Stream.SELECT)
    chosen = select_clients(avail, now, m, busy, rng)
    if len(chosen) == 0 and m > 0 and not avail.online(now).any():
        t = next_online_time(avail, now)
        if not math.isfinite(t) or t < now:
            raise ValueError(f"cannot move the clock from {now} to {t}")
        now = float(t)
        chosen = select_clients(avail, now, m, busy, rng)
    if overrides_choose(ctx.algorithm) and len(chosen):
        online = avail.online(now)
        online[busy] = False
        picked = ctx.algorithm.choose(
            np.flatnonzero(online), len(chosen), rng, server_state, ctx.store
        )
        if picked is not None:
            chosen = np.sort(np.asarray(picked, dtype=np.int64))
    return chosen, now


def overrides_choose(algorithm: Any) -> bool:
    """Whether the algorithm picks the round's clients itself (``Algorithm.chooses``)."""
    chooses = getattr(algorithm, "chooses", None)
    return bool(chooses()) if chooses is not None else False


def arrivals(
    ctx: RoundContext,
    rnd: int,
    selected: np.ndarray,
    epochs: np.ndarray,
    sizes: np.ndarray,
    start: float,
    wire: WireBytes,
) -> list[Arrival]:
    """When each selected client's update reaches the server: compute, plus its download and
    upload (``wire``: the compressed sizes when transfers are compressed)."""
    pop, c = ctx.fed.population, ctx.cfg.clock
    # the population's arrays were validated when it was built; sizes and epochs are counts
    # ms/sample, or the model's training FLOPs over the device's GFLOP/s where it declares one
    # (each client's own group's model with --model-groups)
    samples, ep = np.asarray(sizes, np.float64), np.asarray(epochs, np.float64)
    extra = public_samples(ctx)
    if extra:  # distillation passes over the public set cost a training sample each
        samples, ep = samples * ep + extra, np.ones_like(ep)
    comp = pop.compute_seconds(
        selected,
        samples,
        ep,
        np.float64(c.compute_factor),
        client_train_flops(ctx.fed.groups, selected) if ctx.fed.groups else ctx.flops_per_sample,
    )
    dur = comp + transfer_seconds_unchecked(
        wire.download,
        wire.upload,
        up_kbps=pop.up_kbps[selected],
        down_kbps=pop.down_kbps[selected],
        latency_ms=pop.latency_ms[selected],
    )
    return [
        Arrival(int(k), rnd, start + float(d), float(s))
        for k, d, s in zip(selected.tolist(), dur.tolist(), comp.tolist(), strict=True)
    ]


def public_samples(ctx: RoundContext) -> int:
    """Public samples each client trains on a round besides its own (the algorithm's
    ``public_passes`` over the server's public set: KT-pFL's and FedMD's distillation)."""
    public = ctx.fed.public_x
    if public is None or not getattr(ctx.algorithm, "uses_public", False):
        return 0
    before, after = ctx.algorithm.public_passes()
    return (before + after) * len(public)


def make_plan(
    ctx: RoundContext,
    rnd: int,
    now: float,
    in_flight: list[InFlight],
    server_state: dict[str, Any],
    linear: bool,
    refuse: Callable[[np.ndarray], set[int]] | None = None,
) -> RoundPlan:
    """Plan round ``rnd`` from virtual time ``now`` (see :class:`RoundPlan`; ``plan.start`` is
    when it starts, later than ``now`` when nobody was online). The hooks' ``on_plan`` runs next
    (the engine calls it), then :func:`plan_tasks`.

    ``refuse(selected)`` names selected clients the server refuses when the round starts (a
    rule's bans): they are sent the model (counted on the wire) but neither train nor upload,
    get the verdict ``(kept=False, reason="banned")``, and the round does not wait for them."""
    cfg, seed = ctx.cfg, ctx.cfg.experiment.seed
    selected, start = select(ctx, rnd, now, in_flight, server_state)
    mal = ctx.adversary.malicious(selected, stream(seed, rnd, Stream.ATTACK))
    epochs = ctx.algorithm.client_epochs(len(selected), stream(seed, rnd, Stream.EPOCHS))
    sizes = ctx.train_clients.sizes(selected)
    wire, writes = plan_wire(ctx, rnd, selected, server_state)
    new = arrivals(ctx, rnd, selected, epochs, sizes, start, wire)
    dropout, lost_s, lost_at = dropouts(ctx, start, new) if cfg.clock.dropout else ([], 0.0, [])
    if dropout:
        gone = set(dropout)
        new = [a for a in new if a.client_id not in gone]
    verdicts: list[Verdict] = []
    refused = refuse(selected) if refuse is not None else set()
    if refused:
        new = [a for a in new if a.client_id not in refused]
    partial_s = 0.0
    if not ctx.algorithm.keep_partial_work():
        # partial-work clients are rejected before the round closes: the server neither waits
        # for them nor trains them (the FedAvg baseline of the FedProx paper)
        partial = set(selected[epochs < cfg.algorithm.local_epochs].tolist())
        partial &= {a.client_id for a in new}
        verdicts = [
            Verdict(int(c), False, 0.0, float("nan"), "partial-work") for c in sorted(partial)
        ]
        partial_s = sum(a.compute_s for a in new if a.client_id in partial)
        new = [a for a in new if a.client_id not in partial]
    verdicts += [Verdict(c, False, 0.0, float("nan"), BANNED) for c in sorted(refused)]
    # a step that only drop-outs end ends when the server learns of the last one
    outcome = ctx.policy.close_step(rnd, start, new, [f.arrival for f in in_flight], lost_at)
    now = {a.client_id for a in outcome.arrived if a.base_round == rnd}
    hold = {a.client_id for a in outcome.pending if a.base_round == rnd}
    plan = RoundPlan(
        rnd,
        start,
        selected,
        mal,
        epochs,
        sizes,
        client_seeds(seed, rnd, selected),
        new,
        outcome,
        now,
        hold,
        verdicts,
        # rows the driver still has to compress cannot be pre-aggregated on the actors
        linear and not ctx.compression.upload,
        dropout,
        wire=wire,
        writes=writes,
    )
    dropped_s = sum(a.compute_s for a in outcome.dropped)
    plan.wasted_seconds = dropped_s + partial_s + lost_s
    plan.device_seconds = sum(a.compute_s for a in outcome.arrived) + plan.wasted_seconds
    if plan.linear:
        fresh = [i for i, c in enumerate(selected.tolist()) if c in now]
        w = ctx.defense.row_weights(sizes[fresh])
        plan.weights = {int(selected[i]): float(x) for i, x in zip(fresh, w, strict=True)}
    return plan


def plan_tasks(plan: RoundPlan, poison: bool) -> list[TrainTask]:
    """The round's training tasks: the clients trained now or held for later (after the hooks'
    ``on_plan``, which may take banned clients out), in selection order; ``poison``: a data
    attack, applied to the malicious clients' tasks."""
    return [
        TrainTask(int(c), int(e), int(sd), int(n), poison and int(c) in plan.malicious)
        for c, e, sd, n in zip(
            plan.selected.tolist(),
            plan.epochs.tolist(),
            plan.seeds.tolist(),
            plan.sizes.tolist(),
            strict=True,
        )
        if c in plan.now or c in plan.hold
    ]


def dropouts(
    ctx: RoundContext, start: float, new: list[Arrival]
) -> tuple[list[int], float, list[float]]:
    """The clients whose device goes offline before their update lands, the compute
    device-seconds they spent until then, and when each went offline (its drop-out instant,
    when the server learns the update is lost)."""
    if not new:
        return [], 0.0, []
    ids = np.array([a.client_id for a in new], dtype=np.int64)
    finish = np.array([a.finish_time for a in new], dtype=np.float64)
    until = ctx.fed.availability.online_until(start, ids)
    lost = finish > until
    spent = np.minimum(np.array([a.compute_s for a in new], np.float64), until - start)
    return ids[lost].tolist(), float(spent[lost].sum()), until[lost].tolist()
