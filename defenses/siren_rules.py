"""Siren's decision rules: which rows a round rejects, given the alarms and a screening.

:func:`paper_rule` is the decision of Guo et al. (SoCC 2021; the ``siren`` branch of
``train_fn`` in the official code): groups of alarmers and non-alarmers are kept or dropped
together. It assumes full participation: every client alarms or not every round, and a
client that keeps alarming falsely is banned after enough strikes. In a cohort sampled from a
large population a client is seen about once, so bans never happen, attackers (who always
alarm) keep triggering the group rules, and one abnormal alarmer drops every honest
non-alarmer of the round.

:func:`population_rule` is ours: every row is judged on its own screening outcome, whatever
the others did. An alarm is evidence against the *global* model (the previous step may carry
poison) only when the alarmer's own model passes the screening; such a *confirmed* alarm is
what opens a roll-back episode (``defenses/siren.py``). Reputation (strikes and bans) is kept
in the run's client-state store by the client side (``defenses/siren_client.py``), so it
carries across rounds for clients that do return.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from defenses.base import DefenseContext, UpdateBatch

#: verdict reasons of the paper rule's group decisions
NON_ALARMER_DROPPED = "non-alarmer-dropped"
ALARMER_DROPPED = "alarmer-dropped"

#: a screening of some rows: ``rows -> ({row: reason} of abnormal rows, reference accuracy)``
Screen = Callable[[np.ndarray], tuple[dict[int, str], float]]


def row_flags(batch: UpdateBatch, key: str, name: str) -> np.ndarray:
    """The batch signal ``key`` as one bool per row (all False when the batch has none);
    raises ValueError when it has another length."""
    raw = batch.signals.get(key)
    if raw is None:
        return np.zeros(len(batch), dtype=bool)
    a = np.asarray(raw).reshape(-1)
    if a.shape != (len(batch),):
        raise ValueError(
            f"defense {name!r}: signal {key!r} has {a.shape[0]} entries for {len(batch)} rows"
        )
    return a.astype(bool)


def rollback_base(ctx: DefenseContext, enabled: bool) -> torch.Tensor | None:
    """``base_model(t - 1)``, what a roll-back applies this round's mean to, when ``enabled``
    and that model is available (round 0, no ``base_model`` or a pruned round: None)."""
    if not enabled or ctx.round < 1 or ctx.base_model is None:
        return None
    try:
        return ctx.base_model(ctx.round - 1)
    except KeyError:
        return None


def next_strikes(strikes: float, rejected: int, reward: float) -> float:
    """A client's strikes after a round: ``+ rejected`` when some of its rows were rejected,
    else ``reward`` forgiven (floor 0)."""
    return strikes + rejected if rejected else max(0.0, strikes - reward)


def paper_rule(live: np.ndarray, alarm: np.ndarray, screen: Screen, cs: float) -> dict[int, str]:
    """``{row: reason}`` of the non-banned rows ``live`` that the paper's decision rejects.

    With ``A`` the alarming rows of ``live`` and ``N`` the others:

    - ``|A| >= 2``: screen ``A``. If some alarmer is abnormal, reject all of ``N``
      (``"non-alarmer-dropped"``) and the abnormal alarmers (their screening reason); keep the
      normal alarmers. Otherwise screen ``N`` with reference ``ref_N`` (``ref_A`` of ``A``): if
      ``ref_N < (1 - cs) * ref_A`` (the alarms were right), reject all of ``N`` and keep
      ``A``; else (the alarms were false) reject all of ``A`` (``"alarmer-dropped"``) and the
      abnormal rows of ``N``. An empty ``N`` counts as below the threshold.
    - ``|A| == 1``: screen all rows; reject the abnormal ones.
    - ``|A| == 0``: keep every row.
    """
    alarmers = live[alarm[live]]
    quiet = live[~alarm[live]]
    if len(alarmers) == 0:
        return {}
    if len(alarmers) == 1:
        return screen(live)[0]
    bad_a, best_a = screen(alarmers)
    if bad_a:
        out = {int(r): NON_ALARMER_DROPPED for r in quiet}
        out.update(bad_a)
        return out
    bad_n, best_n = screen(quiet)
    if len(quiet) == 0 or best_n < (1.0 - cs) * best_a:
        return {int(r): NON_ALARMER_DROPPED for r in quiet}
    out = {int(r): ALARMER_DROPPED for r in alarmers}
    out.update(bad_n)
    return out


def population_rule(
    live: np.ndarray,
    alarm: np.ndarray,
    screen: Screen,
    acc: np.ndarray,
    margin: Callable[[float, np.ndarray], float],
    always: bool = False,
) -> tuple[dict[int, str], bool]:
    """``({row: reason} of rejected rows, confirmed)``: our rule for sampled cohorts.

    A round with an alarm among ``live`` (every round with ``always``) screens all of ``live``
    together; each row is rejected exactly when its own screening fails, never for what
    another row did. A round without alarms keeps every row, as in the paper: the alarms are
    what triggers the server's check (on a clean run a check of every round would reject the
    honest models that are merely behind, e.g. the 0.1-accuracy ones of round 0).

    ``confirmed`` says whether the alarms are evidence against the global model: some
    alarmers' rows pass the screening (an alarmer whose own model fails confirms nothing) and
    the median root-set accuracy of the non-alarmers (who trained from the global model) is
    below that of the passing alarmers by more than ``margin(ref, acc_N)`` (``ref`` the
    alarmers' median, ``acc_N`` the non-alarmers' accuracies). This is the paper's group
    test, used here only to open a roll-back episode: attackers who alarm and train from the
    global model like everyone else cannot trigger roll-backs with it. Without non-alarmers
    nothing is confirmed.
    """
    alarmers = live[alarm[live]]
    if len(live) == 0 or (len(alarmers) == 0 and not always):
        return {}, False
    bad = screen(live)[0]
    ok_a = np.array([r for r in alarmers.tolist() if r not in bad], np.int64)
    quiet = np.array([r for r in live[~alarm[live]].tolist() if np.isfinite(acc[r])], np.int64)
    if not len(ok_a) or not len(quiet):
        return bad, False
    ref_a = float(np.median(acc[ok_a]))
    return bad, bool(float(np.median(acc[quiet])) < ref_a - margin(ref_a, acc[quiet]))


def kept_weights(kept: np.ndarray, num_samples: np.ndarray, uniform: bool) -> np.ndarray:
    """Aggregation weight of each row: ``1 / |kept|`` (uniform) or ``n_k / sum n`` over the
    kept rows (samples; uniform when they hold no samples); 0 for rejected rows."""
    w = np.zeros(len(kept))
    if not kept.any():
        return w
    n = np.asarray(num_samples, np.float64) * kept
    if uniform or n.sum() <= 0:
        w[kept] = 1.0 / int(kept.sum())
        return w
    return n / n.sum()


def kept_mean(
    batch: UpdateBatch,
    global_flat: torch.Tensor,
    kept: np.ndarray,
    w: np.ndarray,
    uniform: bool,
    base_prev: torch.Tensor | None,
) -> torch.Tensor:
    """The weighted mean of the kept updates, plus ``base_prev - global`` on a roll-back.

    Summed in float64 in (client id, base round) order, so the result does not depend on row
    order; the uniform mean is a sum divided by the count (the paper variant's arithmetic).
    Nothing kept gives a zero mean.
    """
    out = torch.zeros(global_flat.shape[0], dtype=torch.float64)
    order = np.lexsort((batch.base_rounds, batch.client_ids))
    rows = order[kept[order]]
    for i in rows.tolist():
        u = batch.updates[i].double()
        out += u if uniform else float(w[i]) * u
    if len(rows) and uniform:
        out /= len(rows)
    if base_prev is not None:
        out += base_prev.double() - global_flat.double()
    return out.to(global_flat.dtype)
