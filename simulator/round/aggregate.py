"""Step 4 of a round: aggregate. One screening of malformed rows, the defense's aggregate and
verdicts (or the actors' partial sums of a linear rule plus the carried rows), then the
algorithm's server update from the defended aggregate, the verdicts and the clients' extras.

:func:`aggregate`, :func:`context` and :func:`server_step` read only the round's server side
(:class:`~simulator.round.server.ServerSide`): the engine passes a view of its state, the ledger's
committee and audit (:mod:`ledger.replay`) one built from the run's config.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch

from defenses import DefenseContext, PreconditionError, UpdateBatch, Verdict, screen_malformed
from simulator.algorithms import ServerRound
from simulator.policies import RoundPolicy
from simulator.rng import Stream, stream
from simulator.round.collect import Collected, combine_linear, make_batch
from simulator.round.plan import RoundPlan
from simulator.round.server import ServerSide
from simulator.round.wire import downlink


def aggregate_round(
    side: ServerSide, policy: RoundPolicy, plan: RoundPlan, col: Collected
) -> tuple[UpdateBatch | None, list[Verdict], torch.Tensor]:
    """The defended aggregate (shared entries) and every client's verdict."""
    size = side.space.size
    if plan.linear:
        cb = make_batch(col.carried, size, plan.banned)
        ok, bad = screen_malformed(cb, size) if col.carried else (np.zeros(0, np.int64), [])
        delta, vs = combine_linear(side.defense, plan, col, ok, cb, size)
        return None, plan.verdicts + vs + bad, delta
    batch = make_batch(col.fresh + col.carried, size, plan.banned)
    if policy.adjusts_rows and len(batch.client_ids):
        batch = adjusted(policy, side, plan.round, batch)
    delta, vs = aggregate(side, plan.round, batch)
    return batch, plan.verdicts + vs, delta


def adjusted(policy: RoundPolicy, side: ServerSide, rnd: int, batch: UpdateBatch) -> UpdateBatch:
    """The batch with the round policy's row adjustment (staleness weights, asynchronous
    mixing) applied; what the defense aggregates and the ledger records."""
    staleness = rnd - batch.base_rounds.astype(np.int64)

    def drift() -> torch.Tensor:
        g = side.global_shared
        bases = {
            int(b): side.space.shared_of(side.base_model(int(b))) - g
            for b in np.unique(batch.base_rounds)
        }
        return torch.stack([bases[int(b)] for b in batch.base_rounds])

    rows = policy.adjust_rows(batch.updates, staleness, drift)
    return dataclasses.replace(batch, updates=rows)


def aggregate(side: ServerSide, rnd: int, batch: UpdateBatch) -> tuple[torch.Tensor, list[Verdict]]:
    """Screen malformed rows once, then let the defense aggregate the rest (the ledger's
    committee and audit replay rounds through this same function).

    A round whose rows break the rule's precondition (a cohort draw with too few rows for
    Krum's ``f``, ...) is skipped, not clamped: every row is rejected with reason
    ``"precondition: <what the rule needs>"`` and the aggregate is zero.
    """
    ok, bad = screen_malformed(batch, side.space.size)
    rows = batch.subset(ok)
    try:
        result = side.defense(rows, context(side, rnd))
    except PreconditionError as e:
        why = "precondition: " + str(e).split(": needs ", 1)[-1]
        skipped = [Verdict(int(c), False, 0.0, float("nan"), why) for c in rows.client_ids]
        return torch.zeros(side.space.size, dtype=torch.float32), bad + skipped
    return result.delta, bad + list(result.verdicts)


def context(side: ServerSide, rnd: int) -> DefenseContext:
    """What the defense may read: the round, the global model, the public set and scorers, in
    the shared space of the rows (full models are rebuilt with the global local entries)."""
    pub = side.public_x is not None
    sp, ev, g = side.space, side.evaluation, side.global_flat
    return DefenseContext(
        rnd,
        side.global_shared,
        side.public_x,
        side.public_y,
        lambda flat: ev.test(sp.full_of(flat, g)),
        stream(side.seed, rnd, Stream.DEFENSE),
        (lambda m: ev.score_models(sp.full_rows(m, g))) if pub else None,
        lambda r: sp.shared_of(side.base_model(r)),
        (lambda: sp.shared_of(ev.server_update(rnd, g))) if pub else None,
    )


def server_step(
    side: ServerSide,
    rnd: int,
    delta: torch.Tensor,
    verdicts: list[Verdict],
    arrived: Sequence[int],
    extras_of: dict[int, dict[str, np.ndarray]],
    batch: UpdateBatch | None = None,
) -> torch.Tensor:
    """The algorithm's server update from the defended aggregate (shared entries), the
    verdicts of the ``arrived`` clients and their extras (and their rows, ``batch``, for an
    algorithm that reads them); returns the next global model (of which a compressed download
    keeps only the change it sends)."""
    v = {x.client_id: x for x in verdicts}
    ids = np.array(sorted(set(v) & {int(c) for c in arrived}), dtype=np.int64)
    rows = None
    if side.algorithm.reads_rows:
        if batch is None:
            raise ValueError(f"algorithm {side.algorithm.name!r} reads the rows: none were kept")
        at = {int(c): i for i, c in enumerate(batch.client_ids.tolist())}
        have = np.array([c in at for c in ids.tolist()], bool)
        ids = ids[have]  # a client rejected before its row existed (dropout, partial work)
        rows = batch.updates[torch.tensor([at[c] for c in ids.tolist()], dtype=torch.long)]
    keys = sorted({k for c in ids.tolist() for k in extras_of.get(c, {})})
    extras = (
        {k: torch.from_numpy(np.stack([extras_of[c][k] for c in ids.tolist()])) for k in keys}
        if len(ids)
        else {}
    )
    new = side.algorithm.server_update(
        ServerRound(
            rnd,
            side.global_flat,
            side.space.full_delta(delta),
            ids,
            np.array([v[c].kept for c in ids.tolist()], bool),
            np.array([v[c].weight for c in ids.tolist()], np.float64),
            extras,
            side.server_state,
            side.num_clients,
            side.layout.slices,
            side.store,
            rows,
        )
    )
    return downlink(side.compression, side.space, side.global_flat, new)
