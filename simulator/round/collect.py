"""Steps 2 and 3 of a round: train the planned clients, then collect what they return.

Training (:func:`train`) sends each worker (an actor, or the driver itself for a round too small
to pay for a Ray call) its clients, their client-state rows and start models. Collecting is two
functions with the hooks' ``on_collect`` between them (the engine calls it, so the hooks see the
honest rows, e.g. Siren): :func:`gather` turns the workers' answer into the clients' new state
(which the engine writes into the store) and their returned rows with named extras;
:func:`settle` lets a model attack rewrite the malicious rows and moves carried updates in and out
of flight.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from actors.arena import Arena
from actors.request import TrainRequest, TrainTask
from defenses import Defense, UpdateBatch, Verdict
from simulator.rng import Stream, stream
from simulator.round.context import RoundContext
from simulator.round.grouped import local_starts, local_writes
from simulator.round.plan import RoundPlan
from simulator.round.types import InFlight
from simulator.round.wire import compress_returned
from simulator.training.groups import offsets
from simulator.training.step import PUBLIC_INPUTS


@dataclass
class Collected:
    """What a round's training produced, ready to aggregate.

    ``fresh`` are this round's rows that arrive now (in task order), ``carried`` the earlier
    rounds' rows that arrive now; ``info`` maps every trained client to (samples, loss, finite).
    On a pre-aggregated linear round ``fresh`` is empty and ``partial`` holds the actors'
    weighted sum of the fresh rows and its total weight.
    """

    fresh: list[InFlight]
    carried: list[InFlight]
    info: dict[int, tuple[int, float, bool]]
    extras: dict[int, dict[str, np.ndarray]]
    partial: tuple[np.ndarray | None, float] | None = None
    seconds: float = 0.0
    where: str = "actors"
    losses: list[float] = field(default_factory=list)
    chunks: list[dict[str, float | int]] = field(default_factory=list)
    placement: dict[str, Any] | None = None


@dataclass
class Gathered:
    """The workers' answer of a round, before the hooks and the model attack.

    ``writes`` are the clients' new client-state rows (table, ids, rows) for the engine to put
    in the store; ``returned`` maps each client whose row came back to its update.
    """

    writes: list[tuple[str, np.ndarray, np.ndarray]]
    returned: dict[int, InFlight]
    info: dict[int, tuple[int, float, bool]]
    extras: dict[int, dict[str, np.ndarray]]
    partial: tuple[np.ndarray | None, float] | None
    seconds: float
    chunks: list[dict[str, float | int]]


def train(
    ctx: RoundContext,
    plan: RoundPlan,
    executor: Any,
    where: str,
    global_flat: torch.Tensor,
    server_state: dict[str, torch.Tensor],
) -> dict[str, Any]:
    """Run the plan's tasks on ``executor`` (the driver's trainer or the actor pool, ``where``
    says which) from ``global_flat``; returns the workers' merged answer."""
    kinds = list(executor.kinds())
    if where == "driver":
        groups, chunks = [plan.tasks], [None]
    else:
        placed = ctx.scheduler.place(plan.tasks, kinds, plan.round)
        groups, chunks = placed.groups, placed.chunks
    # client state is fetched in group order, so each group's rows are a contiguous view
    ids = np.array([t.client_id for g in groups for t in g], dtype=np.int64)
    state = {t: ctx.store.get(t, ids)[0] for t in ctx.algorithm.client_state}
    starts = local_starts(
        ctx.store,
        ctx.spaces or (ctx.space,),
        offsets(ctx.fed.groups),
        ids,
        global_flat,
        dict(plan.starts),
    )
    requests, at = [], 0
    for g, sizes in zip(groups, chunks, strict=True):
        gid = [t.client_id for t in g]
        summed = np.array([c in plan.now for c in gid], dtype=bool) if plan.linear else None
        weights = (
            np.array([plan.weights.get(c, 0.0) for c in gid], dtype=np.float64)
            if plan.linear
            else None
        )
        requests.append(
            TrainRequest(
                g,
                summed,
                weights,
                {c: starts[c] for c in gid if c in starts},
                {k: v[at : at + len(g)] for k, v in state.items()},
                sizes,
            )
        )
        at += len(g)
    shared = {k: server_state[k].numpy() for k in ctx.algorithm.sends}
    if ctx.algorithm.uses_public:  # the public inputs its step trains or predicts on
        shared[PUBLIC_INPUTS] = ctx.fed.public_x.numpy()

    def replace(tasks: list[TrainTask], actors: list[int]) -> list[list[TrainTask]]:
        """A dead actor's tasks onto ``actors`` by the configured placement."""
        return ctx.scheduler.replace(tasks, [kinds[a] for a in actors], plan.round)

    return executor.run(requests, global_flat.numpy(), shared, replace=replace)


def gather(ctx: RoundContext, plan: RoundPlan, res: dict[str, Any]) -> Gathered:
    """The clients' new state (to write), their rows with named extras, per-client info."""
    ids = res["client_ids"]
    tables = set(ctx.algorithm.client_state)
    writes = list(plan.writes) + [(t, ids, res["outputs"][t]) for t in ctx.algorithm.client_state]
    if res["local"] is not None and len(ids):
        writes += local_writes(ctx.spaces or (ctx.space,), ids, res["local"])
    extra_keys = [k for k in res["outputs"] if k not in tables]
    extras = (
        {int(c): {k: res["outputs"][k][i] for k in extra_keys} for i, c in enumerate(ids.tolist())}
        if extra_keys
        else {}
    )
    info = {
        int(c): (int(n), float(lo), bool(ok))
        for c, n, lo, ok in zip(ids, res["num_samples"], res["losses"], res["finite"], strict=True)
    }
    arrival = {a.client_id: a for a in plan.arrivals}
    returned = {
        int(c): InFlight(
            arrival[int(c)],
            row,
            info[int(c)][0],
            info[int(c)][1],
            int(c) in plan.malicious,
            plan.alarms.get(int(c), False),
            extras.get(int(c), {}),
        )
        for c, row in zip(
            res["row_ids"], res["rows"] if res["rows"] is not None else [], strict=True
        )
    }
    partial = (res["sum"], float(res["sum_weight"])) if plan.linear else None
    return Gathered(
        writes, returned, info, extras, partial, float(res["seconds"]), res.get("chunks", [])
    )


def settle(
    ctx: RoundContext,
    plan: RoundPlan,
    got: Gathered,
    in_flight: list[InFlight],
    global_shared: torch.Tensor,
    where: str,
) -> tuple[Collected, list[InFlight]]:
    """Apply the model attack to the malicious rows, compress the rows as their clients send
    them (``--compression``), then split the updates into what is aggregated now (fresh and
    carried) and what stays in flight; returns the round's :class:`Collected` (its
    ``placement`` is the engine's to fill) and the new in-flight list."""
    returned, info = got.returned, got.info
    ctx.adversary.rewrite(
        plan.round,
        global_shared,
        returned,
        plan.malicious,
        stream(ctx.cfg.experiment.seed, plan.round, Stream.MODEL_ATTACK),
    )
    if plan.wire is not None:
        compress_returned(ctx.compression, plan.wire, plan.selected, returned, global_shared)
    keys = {(a.client_id, a.base_round) for a in plan.outcome.arrived}
    carried = [f for f in in_flight if (f.arrival.client_id, f.arrival.base_round) in keys]
    pending = {(a.client_id, a.base_round) for a in plan.outcome.pending}
    still = [f for f in in_flight if (f.arrival.client_id, f.arrival.base_round) in pending] + [
        returned[c] for c in sorted(plan.hold)
    ]
    fresh = [] if plan.linear else [returned[c] for c in sorted(plan.now)]
    losses = [
        lo
        for lo in [f.loss for f in carried] + [info[c][1] for c in sorted(plan.now)]
        if np.isfinite(lo)
    ]
    return Collected(
        fresh, carried, info, got.extras, got.partial, got.seconds, where, losses, got.chunks
    ), still


ORDERED = Arena()  # a round's rows in client order, reused once nothing refers to them


def stack_rows(rows: list[np.ndarray]) -> np.ndarray:
    """``np.stack(rows)``, into a buffer reused from round to round (:data:`ORDERED`); rows
    that are rows of one matrix (the actors' merged answer) are gathered from it at once, or
    sliced without a copy when they are its rows in order (at 1,000 clients a round, stacking
    1,000 views one by one costs tens of ms)."""
    base = rows[0].base
    if (
        isinstance(base, np.ndarray)
        and base.ndim == 2
        and base.flags.c_contiguous
        and all(r.base is base for r in rows)
        and base.shape[1] == rows[0].shape[0]
    ):
        start = base.__array_interface__["data"][0]
        step = base.strides[0]
        idx = np.array([(r.__array_interface__["data"][0] - start) // step for r in rows])
        if np.array_equal(idx, np.arange(idx[0], idx[0] + len(idx))):
            return base[idx[0] : idx[0] + len(idx)]
        out = ORDERED.empty((len(idx), base.shape[1]), base.dtype)
        # the rows' own positions, in range by construction: mode="raise" would buffer the
        # whole gather through a temporary (numpy does, with ``out``), 14 ms against 4 ms for
        # 1,000 rows of 36 KB
        return np.take(base, idx, axis=0, out=out, mode="clip")
    # rows of several matrices (a batch of carried and fresh updates): copied one by one into
    # a reused buffer, as fast as a gather and without a fresh matrix's page faults
    shape = rows[0].shape
    if any(r.shape != shape for r in rows):
        raise ValueError(f"rows of different shapes: {sorted({r.shape for r in rows})}")
    out = ORDERED.empty((len(rows), *shape), np.result_type(*{r.dtype for r in rows}))
    for i, r in enumerate(rows):
        out[i] = r
    return out


def make_batch(
    arrived: list[InFlight], size: int, banned: AbstractSet[int] = frozenset()
) -> UpdateBatch:
    """The update batch of the rows aggregated this round; the rows of the clients in
    ``banned`` (the plan's) carry the signal ``"banned"``."""
    upd = (
        torch.from_numpy(stack_rows([f.row for f in arrived])) if arrived else torch.zeros(0, size)
    )
    ids = np.array([f.arrival.client_id for f in arrived], np.int64)
    return UpdateBatch(
        upd,
        ids,
        np.array([f.num_samples for f in arrived], np.int64),
        np.array([f.arrival.base_round for f in arrived], np.int64),
        {
            "loss": np.array([f.loss for f in arrived], np.float32),
            "alarm": np.array([f.alarm for f in arrived], bool),
            "banned": np.array([c in banned for c in ids.tolist()], bool),
        },
    )


def combine_linear(
    defense: Defense,
    plan: RoundPlan,
    col: Collected,
    carried_ok: np.ndarray,
    carried_batch: UpdateBatch,
    size: int,
) -> tuple[torch.Tensor, list[Verdict]]:
    """A linear rule's aggregate from the actors' partial sum of the fresh rows plus the carried
    rows (already screened: ``carried_ok``); verdict weights from the plan's weights."""
    psum, pweight = col.partial if col.partial is not None else (None, 0.0)
    w_old = defense.row_weights(carried_batch.num_samples[carried_ok])
    total = float(pweight) + float(w_old.sum())
    acc = np.zeros(size, np.float64)
    if psum is not None:
        acc += psum
    if len(carried_ok):
        rows = carried_batch.updates[torch.from_numpy(carried_ok)].numpy()
        acc += w_old @ rows.astype(np.float64)
    delta = torch.from_numpy((acc / total if total > 0 else acc).astype(np.float32))
    total = total or 1.0
    fresh = sorted(plan.now)
    vs = [Verdict(c, True, plan.weights[c] / total, float("nan")) for c in fresh if col.info[c][2]]
    vs += [Verdict(c, False, 0.0, float("nan"), "non-finite") for c in fresh if not col.info[c][2]]
    vs += [
        Verdict(int(c), True, float(w) / total, float("nan"))
        for c, w in zip(carried_batch.client_ids[carried_ok], w_old, strict=True)
    ]
    return delta, vs
