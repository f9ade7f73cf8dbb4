"""Siren's server side: alarm-driven accuracy screening on a root set, penalties and roll-back.

References
----------
H. Guo, H. Wang, T. Song, Y. Hua, Z. Lv, X. Jin, Z. Xue, R. Ma, H. Guan. "Siren: Byzantine-robust
Federated Learning via Proactive Alarming". ACM Symposium on Cloud Computing (SoCC), 2021.
Official code: github.com/AISIGSJTU/Siren (``server_detect`` and the ``siren`` branch of
``train_fn`` in ``main.py``).

The client side (holdout test, alarms, alarming clients training from their own previous model)
is ``defenses/siren_client.py`` and runs in the engine; the alarms reach this module as the batch
signal ``"alarm"``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from defenses.base import (
    AggregateResult,
    Defense,
    DefenseContext,
    UpdateBatch,
    Verdict,
    full_models,
)
from defenses.geomed import check_positive, check_unit
from defenses.krum import check_count

#: verdict reasons of rejected rows
ABNORMAL_ACCURACY = "abnormal-accuracy"
ABNORMAL_COSINE = "abnormal-cosine"
NON_ALARMER_DROPPED = "non-alarmer-dropped"
ALARMER_DROPPED = "alarmer-dropped"
BANNED = "banned"
#: note on kept rows of a round whose aggregate was applied to the previous round's global model
ROLLBACK = "rollback"


def screen(rows: np.ndarray, acc: np.ndarray, updates: torch.Tensor, client_ids: np.ndarray,
           cs: float) -> tuple[dict[int, str], float]:
    """Siren's screening of the rows ``rows``: ``({row: reason} of abnormal rows, best acc)``.

    The best row ``b`` has the highest finite root-set accuracy (ties: smallest client id).
    Row ``k`` is abnormal when ``acc_k < (1 - cs) * acc_b`` (``"abnormal-accuracy"``; a
    non-finite accuracy counts as abnormal) or, failing that, when ``cos(u_k, u_b) <= 0``
    (``"abnormal-cosine"``; decided by the sign of the float64 dot product, so a zero update
    is abnormal); ``b`` itself is never abnormal by cosine. An empty set, or one without a
    finite accuracy, has best ``-inf`` (every row of the latter is abnormal).
    """
    rows = np.asarray(rows, dtype=np.int64)
    finite = [int(r) for r in rows if math.isfinite(acc[r])]
    if not finite:
        return {int(r): ABNORMAL_ACCURACY for r in rows}, -math.inf
    b = min(finite, key=lambda r: (-acc[r], int(client_ids[r])))
    best = float(acc[b])
    ub = updates[b].double()
    out: dict[int, str] = {}
    for r in (int(r) for r in rows):
        if not math.isfinite(acc[r]) or acc[r] < (1.0 - cs) * best:
            out[r] = ABNORMAL_ACCURACY
        elif r != b and float(updates[r].double() @ ub) <= 0.0:
            out[r] = ABNORMAL_COSINE
    return out, best


class SirenDefense(Defense):
    """Siren (Guo et al., SoCC 2021), the server's decision in one round.

    Parameters
    ----------
    cs : float
        The server margin ``C_s``, ``0 < cs < 1`` (default 0.1): a client is abnormal when its
        root-set accuracy is below ``(1 - cs)`` times the best accuracy of the screened set.
    rounds_total : int
        ``T``, the run's number of rounds, integer >= 1 (default 100; the engine passes
        ``experiment.rounds``). Only used for the ban threshold.
    ban_fraction : float
        ``0 < ban_fraction <= 1`` (default 0.45): a client is banned once its strikes reach
        ``max(1, floor(ban_fraction * T))`` (floor taken with a 1e-9 tolerance so that e.g.
        ``0.29 * 100`` gives 29, not 28).
    reward : float
        Strikes forgiven per round in which a client's rows are all accepted, finite >= 0
        (default 0.5; strikes never go below 0).
    rollback : bool
        Apply the roll-back (default True; see Notes, step 5).

    Notes
    -----
    Row ``k`` stands for the full model ``w_k = base_model(tau_k) + u_k`` (``ctx.global_flat``
    for a fresh row when the context has no ``base_model``). The ``[K, P]`` full models of all
    non-banned rows are scored together by ``ctx.score_models`` every round; a row's verdict
    score is its root-set accuracy (``nan`` for banned rows, which are not scored). The
    server-held public set is Siren's root set; a run without one fails with ValueError.

    1. *Bans*: rows of banned clients are rejected (``"banned"``) and take no further part:
       their alarms are not counted and they are not screened.
    2. *Decision*, with ``A`` the alarming rows (``signals["alarm"]`` nonzero; no signal means
       no alarms) and ``N`` the others, screening as in :func:`screen`:

       - ``|A| >= 2``: screen ``A``. If some alarmer is abnormal, reject all of ``N``
         (``"non-alarmer-dropped"``) and the abnormal alarmers (their screening reason); keep
         the normal alarmers. Otherwise screen ``N`` with best accuracy ``best_N`` and
         ``best_A`` of ``A``: if ``best_N < (1 - cs) * best_A`` (the non-alarmers' best model
         is itself abnormal against the alarmers' best: the alarms were right), reject all of
         ``N`` (``"non-alarmer-dropped"``) and keep ``A``; else (the alarms were false) reject
         all of ``A`` (``"alarmer-dropped"``) and the abnormal rows of ``N``, keep the normal
         rows of ``N``. An empty ``N`` counts as below the threshold (nothing to drop).
       - ``|A| == 1``: screen all rows; reject the abnormal ones.
       - ``|A| == 0``: keep every row.

       The official code uses absolute margins in accuracy points (8 points for the screening,
       3 points for the ``best_N`` test, 5 for the one-alarm screening); here one relative
       margin ``cs`` serves all three, as the issue specifies.
    3. *Aggregate*: the kept rows' updates are averaged with equal weights ``1 / |kept|`` (not
       sample weights), summed in float64 in (client id, base round) order so the result does
       not depend on row order. Nothing kept gives a zero mean.
    4. *Penalty and reward*: a client gains one strike per rejected row (bans included) and,
       in a round where all its rows were accepted, loses ``reward`` strikes (floor 0). At
       ``strikes >= ban threshold`` it is banned for the rest of the run.
    5. *Roll-back*: a round *detects* an attack when it rejects a row for a reason other than
       ``"banned"``. The first detecting round of an episode (the previous aggregated round
       detected nothing) returns the new global model ``base_model(t - 1) + mean``, i.e. it
       undoes the previous round's step, which may carry poison that the clients' alarms
       only reveal now, and applies this round's mean to the model before it. The returned
       delta is ``base_model(t - 1) - global_t + mean`` and kept rows get the note
       ``"rollback"``. Later detecting rounds of the same episode do not roll back again; a
       round without a detection ends the episode. This is the official code's ``flag`` /
       ``exist_mal`` logic (there, bans also count as a detection, which would keep the
       episode open forever once a client is banned). Round 0, a context without
       ``base_model``, or a pruned round ``t - 1`` (``base_model`` raises ``KeyError``) give
       no roll-back (the episode still starts).

    Two defects of the official code are not reproduced: benign updates are picked by their
    position in the shuffled selection rather than by client id, and the root set is drawn with
    replacement (here the engine's public set is a fixed split without repeats).

    State (``state_dict``): ``{"strikes": {client: float}, "banned": [client, ...],
    "in_episode": bool}`` — plain Python values.
    """

    name = "siren"

    def __init__(self, cs: float = 0.1, rounds_total: int = 100, ban_fraction: float = 0.45,
                 reward: float = 0.5, rollback: bool = True) -> None:
        self.cs = check_unit(self.name, "cs", cs)
        self.rounds_total = check_count(self.name, "rounds_total", rounds_total, 1)
        self.ban_fraction = check_unit(self.name, "ban_fraction", ban_fraction, include_one=True)
        self.reward = check_positive(self.name, "reward", reward, allow_zero=True)
        if not isinstance(rollback, bool | np.bool_):
            raise ValueError(f"defense {self.name!r}: rollback {rollback!r} invalid; valid: "
                             "True or False")
        self.rollback = bool(rollback)
        self.strikes: dict[int, float] = {}
        self.banned: set[int] = set()
        self.in_episode = False

    @property
    def ban_threshold(self) -> int:
        """Strikes at which a client is banned: ``max(1, floor(ban_fraction * T))``."""
        return max(1, int(math.floor(self.ban_fraction * self.rounds_total + 1e-9)))

    # -- one round -------------------------------------------------------------------------
    def aggregate(self, batch: UpdateBatch, ctx: DefenseContext) -> AggregateResult:
        if ctx.score_models is None:
            raise ValueError(f"defense {self.name!r}: needs a server root set "
                             "(--public-fraction > 0)")
        n = len(batch)
        ids = batch.client_ids.astype(np.int64)
        alarm = self._alarms(batch)
        banned = np.array([int(c) in self.banned for c in ids], dtype=bool)
        live = np.flatnonzero(~banned)
        acc = np.full(n, np.nan)
        if len(live):
            acc[live] = self._accuracy(batch, ctx, live)
        reasons = self._decide(batch, acc, alarm, live)
        for r in np.flatnonzero(banned):
            reasons[int(r)] = BANNED
        kept = np.array([r not in reasons for r in range(n)], dtype=bool)
        detected = any(why != BANNED for why in reasons.values())
        base_prev = self._rollback_base(ctx) if detected and not self.in_episode else None
        self.in_episode = detected
        delta = self._delta(batch, ctx, kept, base_prev)
        self._penalize(ids, kept)
        w = 1.0 / int(kept.sum()) if kept.any() else 0.0
        note = ROLLBACK if base_prev is not None else ""
        verdicts = tuple(Verdict(int(c), True, w, float(acc[r]), note) if kept[r]
                         else Verdict(int(c), False, 0.0, float(acc[r]), reasons[r])
                         for r, c in enumerate(ids))
        return AggregateResult(delta, verdicts)

    def _alarms(self, batch: UpdateBatch) -> np.ndarray:
        raw = batch.signals.get("alarm")
        if raw is None:
            return np.zeros(len(batch), dtype=bool)
        a = np.asarray(raw).reshape(-1)
        if a.shape != (len(batch),):
            raise ValueError(f"defense {self.name!r}: signal 'alarm' has {a.shape[0]} entries "
                             f"for {len(batch)} rows")
        return a.astype(bool)

    def _accuracy(self, batch: UpdateBatch, ctx: DefenseContext, rows: np.ndarray
                  ) -> np.ndarray:
        """Root-set accuracy of the full models of ``rows`` (one ``score_models`` call)."""
        sub = batch.subset(rows)
        acc = np.asarray(ctx.score_models(full_models(sub, ctx, self.name))["accuracy"],
                         dtype=np.float64).reshape(-1)
        if acc.shape != (len(rows),):
            raise ValueError(f"defense {self.name!r}: score_models must return one accuracy "
                             f"per row ({len(rows)})")
        return acc

    def _decide(self, batch: UpdateBatch, acc: np.ndarray, alarm: np.ndarray,
                live: np.ndarray) -> dict[int, str]:
        """``{row: reason}`` of the non-banned rows rejected by the decision (Notes, step 2)."""
        ids, cs, u = batch.client_ids, self.cs, batch.updates
        alarmers = live[alarm[live]]
        quiet = live[~alarm[live]]
        if len(alarmers) == 0:
            return {}
        if len(alarmers) == 1:
            return screen(live, acc, u, ids, cs)[0]
        bad_a, best_a = screen(alarmers, acc, u, ids, cs)
        if bad_a:
            out = {int(r): NON_ALARMER_DROPPED for r in quiet}
            out.update(bad_a)
            return out
        bad_n, best_n = screen(quiet, acc, u, ids, cs)
        if len(quiet) == 0 or best_n < (1.0 - cs) * best_a:
            return {int(r): NON_ALARMER_DROPPED for r in quiet}
        out = {int(r): ALARMER_DROPPED for r in alarmers}
        out.update(bad_n)
        return out

    def _rollback_base(self, ctx: DefenseContext) -> torch.Tensor | None:
        """``base_model(t - 1)`` when the roll-back is on and that model is available."""
        if not self.rollback or ctx.round < 1 or ctx.base_model is None:
            return None
        try:
            return ctx.base_model(ctx.round - 1)
        except KeyError:
            return None

    @staticmethod
    def _delta(batch: UpdateBatch, ctx: DefenseContext, kept: np.ndarray,
               base_prev: torch.Tensor | None) -> torch.Tensor:
        """Equal-weight mean of the kept updates (+ ``base_prev - global`` on a roll-back)."""
        out = torch.zeros(ctx.global_flat.shape[0], dtype=torch.float64)
        order = np.lexsort((batch.base_rounds, batch.client_ids))   # row-order independent sums
        rows = order[kept[order]]
        for i in rows:
            out += batch.updates[int(i)].double()
        if len(rows):
            out /= len(rows)
        if base_prev is not None:
            out += base_prev.double() - ctx.global_flat.double()
        return out.to(ctx.global_flat.dtype)

    def _penalize(self, ids: np.ndarray, kept: np.ndarray) -> None:
        """One strike per rejected row; ``reward`` forgiven when all of a client's rows pass."""
        for c in sorted({int(c) for c in ids}):
            mine = ids == c
            rejected = int((~kept[mine]).sum())
            s = self.strikes.get(c, 0.0)
            s = s + rejected if rejected else max(0.0, s - self.reward)
            self.strikes[c] = s
            if s >= self.ban_threshold:
                self.banned.add(c)

    # -- state -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Strikes, banned clients and whether a detection episode is open (plain values)."""
        return {"strikes": {int(c): float(s) for c, s in sorted(self.strikes.items())},
                "banned": sorted(int(c) for c in self.banned),
                "in_episode": bool(self.in_episode)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`'s output; an empty dict resets to the fresh state."""
        if not state:
            self.strikes, self.banned, self.in_episode = {}, set(), False
            return
        want = {"strikes", "banned", "in_episode"}
        if set(state) != want:
            raise ValueError(f"defense {self.name!r}: state keys {sorted(state)} invalid; "
                             f"valid: {sorted(want)}")
        self.strikes = {int(c): float(s) for c, s in state["strikes"].items()}
        self.banned = {int(c) for c in state["banned"]}
        self.in_episode = bool(state["in_episode"])
