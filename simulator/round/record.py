"""Step 5 of a round (:mod:`simulator.round.engine`): evaluation when due, and the round record."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from defenses import UpdateBatch, Verdict
from simulator.round.adversary import detection
from simulator.round.collect import Collected
from simulator.round.context import RoundContext
from simulator.round.plan import RoundPlan
from simulator.round.types import RoundRecord
from simulator.round.wire import carried_upload


def make_record(
    ctx: RoundContext,
    plan: RoundPlan,
    col: Collected,
    batch: UpdateBatch | None,
    verdicts: list[Verdict],
    global_flat: torch.Tensor,
    now: float,
    wall_time: Callable[[], float],
) -> RoundRecord:
    """Evaluate ``global_flat`` when due and build the round's record (its event): who was
    selected, kept, dropped, stale or rejected, the virtual time ``now`` and the wall time (read
    from ``wall_time()`` after the evaluation), the chunks and placement, the adversary's
    detection counts."""
    cfg, rnd = ctx.cfg, plan.round
    arrived = plan.now | {f.arrival.client_id for f in col.carried}
    mal_arrived = (plan.now & plan.malicious) | {
        f.arrival.client_id for f in col.carried if f.malicious
    }
    acc = loss = asr = None
    extra: dict[str, Any] = {}
    limit = cfg.experiment.max_virtual_hours * 3600.0
    if (
        (rnd + 1) % cfg.experiment.eval_every == 0
        or rnd == cfg.experiment.rounds - 1
        or (limit and now >= limit)
    ):
        acc, loss = ctx.server.test(global_flat)
        asr = ctx.server.attack_success_rate(global_flat, ctx.adversary.trigger)
        extra.update(ctx.client_eval.evaluate(global_flat))
    rejected = [v.client_id for v in verdicts if not v.kept]
    # a round skipped on the rule's precondition judged no one: not in the detection figures
    skipped = {v.client_id for v in verdicts if v.reason.startswith("precondition")}
    if skipped:
        extra["precondition"] = next(
            v.reason for v in verdicts if v.reason.startswith("precondition")
        )
    staleness = [rnd - a.base_round for a in plan.outcome.arrived]
    extra.update(wire_figures(ctx, plan, col))
    return RoundRecord(
        round=rnd,
        virtual_time=now,
        wall_time=wall_time(),
        selected=plan.selected.tolist(),
        participants=[v.client_id for v in verdicts if v.kept],
        dropped=[a.client_id for a in plan.outcome.dropped],
        stale=[f.arrival.client_id for f in col.carried],
        rejected=rejected,
        verdicts=[v.to_dict() for v in verdicts],
        train_loss=float(np.mean(col.losses)) if col.losses else None,
        accuracy=acc,
        loss=loss,
        extra={
            "round_start": plan.start,
            "aggregated": len(plan.outcome.arrived),
            "staleness": staleness,
            "dropout": plan.dropout,
            "device_seconds": plan.device_seconds,
            "wasted_device_seconds": plan.wasted_seconds,
            "slowest_train_seconds": col.seconds,
            "trained_in": col.where,
            "chunks": col.chunks,
            "placement": col.placement,
            "malicious": sorted(plan.malicious),
            "attack_success_rate": asr,
            "alarms": sorted(c for c, a in plan.alarms.items() if a),
            "detection": detection(
                arrived - skipped, mal_arrived - skipped, [c for c in rejected if c not in skipped]
            ),
            **extra,
        },
        rows=batch,
    )


def wire_figures(ctx: RoundContext, plan: RoundPlan, col: Collected) -> dict[str, Any]:
    """The round's bytes on the wire: the downloads of every selected client (each gets the
    round's model when the round starts) and the uploads that reached the server this round
    (fresh and carried, each update counted once, in the round it lands; an update dropped at a
    deadline or lost to dropout is not counted); also both uncompressed, and how many
    downloads were the whole model."""
    w = plan.wire
    if w is None:
        return {}
    fresh = w.of(plan.selected, plan.now)
    old = carried_upload(ctx, [f.arrival.client_id for f in col.carried])
    return {
        "upload_bytes": fresh["upload"] + old["upload"],
        "download_bytes": float(w.download.sum()),
        "upload_bytes_uncompressed": fresh["full"] + old["full"],
        "download_bytes_uncompressed": float(w.download_full.sum()),
        "dense_downloads": int(w.dense_download.sum()),
    }
