"""Siren's reputation: strikes and bans in the run's client-state store, under both rules.

The paper keeps strikes and bans in the server object, one entry per client ever seen. Here
they live in the client-state store (table ``siren_strikes``, one float64 per client with
strikes; clients back at zero strikes lose their row), which checkpoints them with the run and
spills them past its memory budget. A client is banned once its strikes reach the defense's ban
threshold. The client side (``defenses/siren_client.py``) reads them when a round is planned
and writes them back from the round's verdicts, so the server's aggregation stays a pure
function of the round's rows and signals, and the ledger's replay needs no reputation:

- population rule: a banned client is refused when its round starts (the client side's
  ``refuse`` hook, :func:`banned_among`): it neither trains nor uploads, the round does not wait
  for it, its verdict ``"banned"`` is decided in the plan and the rule never sees a row of it;
- paper rule (as the paper ran here before): a banned client still trains and arrives; the rows
  of the clients banned when the round is planned (:func:`banned_among`) carry the batch signal
  ``"banned"``, and the rule rejects them with the reason ``"banned"`` without judging them. The
  ledger needs no new field for it: the verdict document records those verdicts, and the replay
  takes the signal from them (``ledger/round_build.py``).

Strikes only change at a round's end, after its aggregation, so the bans a round is planned
with are the ones its aggregation sees, stale rows included.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from defenses.siren_rules import next_strikes

#: the client-state table of each client's strikes (float64 scalar rows)
STRIKES = "siren_strikes"
#: verdict reason of a banned client (refused before training, or its rows rejected unjudged)
BANNED = "banned"
#: population rule: verdicts decided before the rule saw the row (no evidence about the update)
NOT_JUDGED = ("banned", "partial-work", "precondition")
#: paper rule: verdicts of rows its aggregation never saw (the engine's screening of malformed
#: rows, partial work, a skipped round); its own ``"banned"`` rejections count, as in the paper
NOT_SEEN = ("partial-work", "precondition", "bad-shape", "non-finite")


def declare(store: Any) -> None:
    """Declare the strikes table (idempotent)."""
    store.declare(STRIKES, (), np.float64)


def strikes_of(store: Any, ids: np.ndarray) -> np.ndarray:
    """Strikes of ``ids`` (0 for clients without a row)."""
    declare(store)
    return store.get(STRIKES, np.asarray(ids, np.int64))[0].astype(np.float64).reshape(-1)


def banned_among(store: Any, ids: Iterable[int], threshold: int) -> set[int]:
    """The clients of ``ids`` whose strikes reach ``threshold``."""
    sel = np.array(sorted({int(c) for c in ids}), np.int64)
    if not len(sel):
        return set()
    return {
        int(c)
        for c, s in zip(sel.tolist(), strikes_of(store, sel).tolist(), strict=True)
        if s >= threshold
    }


def update_strikes(
    store: Any,
    verdicts: Iterable[dict[str, Any]],
    reward: float,
    skip: tuple[str, ...] = NOT_JUDGED,
) -> None:
    """Apply one round's verdicts (``Verdict.to_dict()`` form) to the strikes table.

    A client gains one strike per rejected row and, in a round where all its counted rows were
    kept, loses ``reward`` strikes (floor 0); verdicts whose reason starts with one of ``skip``
    do not count (:data:`NOT_JUDGED` under the population rule, :data:`NOT_SEEN` under the
    paper's). Clients back at zero lose their row.
    """
    rejected: dict[int, int] = {}
    for v in verdicts:
        if any(v["reason"].startswith(r) for r in skip):
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
