"""Siren's reputation under the population rule: strikes in the run's client-state store.

The paper keeps strikes and bans in the server object, one entry per client ever seen. Under the
population rule (``defenses/siren_rules.py``) they live in the client-state store instead (table
``siren_strikes``, one float64 per client with strikes; clients back at zero strikes lose their
row), which checkpoints them with the run and spills them past its memory budget. The client
side reads them when a round is planned (a banned client is refused before it trains, so the
server's aggregation stays a pure function of the recorded rows and alarms, and the ledger's
replay needs no reputation) and writes them back from the round's verdicts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import numpy as np

from defenses.base import Verdict
from defenses.siren_rules import next_strikes

#: the client-state table of each client's strikes (float64 scalar rows)
STRIKES = "siren_strikes"
#: verdict reason of a client refused because it is banned
BANNED = "banned"
#: verdicts decided before the defense saw the row: no evidence about the client's update
NOT_JUDGED = ("banned", "partial-work", "precondition")


def declare(store: Any) -> None:
    """Declare the strikes table (idempotent)."""
    store.declare(STRIKES, (), np.float64)


def strikes_of(store: Any, ids: np.ndarray) -> np.ndarray:
    """Strikes of ``ids`` (0 for clients without a row)."""
    declare(store)
    return store.get(STRIKES, np.asarray(ids, np.int64))[0].astype(np.float64).reshape(-1)


def refuse_banned(store: Any, plan: Any, threshold: int) -> set[int]:
    """Take the banned clients of ``plan`` (``strikes >= threshold``) out of the round.

    They neither train nor arrive: they leave ``plan.now``, ``plan.hold`` and the round
    outcome's arrivals, their compute leaves ``plan.device_seconds``, and each gets the verdict
    ``(kept=False, reason="banned")``. Returns their ids.
    """
    sel = np.asarray(plan.selected, np.int64)
    if not len(sel):
        return set()
    out = {
        int(c)
        for c, s in zip(sel.tolist(), strikes_of(store, sel).tolist(), strict=True)
        if s >= threshold
    }
    if not out:
        return out
    rnd = plan.round

    def gone(a: Any) -> bool:
        return a.client_id in out and a.base_round == rnd

    o = plan.outcome
    plan.device_seconds -= sum(a.compute_s for a in o.arrived if gone(a))
    plan.outcome = dataclasses.replace(
        o,
        arrived=tuple(a for a in o.arrived if not gone(a)),
        pending=tuple(a for a in o.pending if not gone(a)),
    )
    plan.now -= out
    plan.hold -= out
    plan.verdicts.extend(Verdict(c, False, 0.0, float("nan"), BANNED) for c in sorted(out))
    return out


def update_strikes(store: Any, verdicts: Iterable[dict[str, Any]], reward: float) -> None:
    """Apply one round's verdicts (``Verdict.to_dict()`` form) to the strikes table.

    A client gains one strike per rejected row and, in a round where all its judged rows were
    kept, loses ``reward`` strikes (floor 0); verdicts in :data:`NOT_JUDGED` (decided before the
    defense saw a row) do not count. Clients back at zero lose their row.
    """
    rejected: dict[int, int] = {}
    for v in verdicts:
        if any(v["reason"].startswith(r) for r in NOT_JUDGED):
            continue
        c = int(v["client"])
        rejected[c] = rejected.get(c, 0) + (0 if v["kept"] else 1)
    if not rejected:
        return
    ids = np.array(sorted(rejected), np.int64)
    new = np.array(
        [
            next_strikes(s, rejected[c], reward)
            for c, s in zip(ids.tolist(), strikes_of(store, ids).tolist(), strict=True)
        ]
    )
    pos = new > 0
    if pos.any():
        store.put(STRIKES, ids[pos], new[pos])
    if (~pos).any():
        store.delete(STRIKES, ids[~pos])
