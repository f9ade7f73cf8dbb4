"""Siren's root-set screening: the paper's rule and a rule robust to the root set's noise.

Both functions judge a set of rows by the root-set accuracy of their full models (and the
direction of their updates) and return ``({row: reason} of the abnormal rows, reference)``.

:func:`screen` is the paper's (Guo et al., SoCC 2021; ``server_detect`` of the official code):
the reference is the *best* accuracy of the set and a row fails below ``(1 - C_s)`` times it or
when its update points away from the best row's (``cos <= 0``).

:func:`screen_robust` is ours (the method notes, ``shared/notes/methods-ktpfl-fedma-fedala-fedvb-
siren.md``, §6, causes 4 and 5). The best of ``K`` noisy scores sits above the typical honest
score by about 1.5 root-set standard errors at ``K = 10`` (at accuracy 0.9 a 100-sample root set
has a standard error of 3 points), so a bar tied to it rejects honest rows that are merely
unlucky; and one noisy best update is a poor direction to compare with. Our reference is the
rows that raised no alarm: their median accuracy and their mean update. Under Siren's threat
model (attackers alarm) these are the honest rows, even when attackers are a majority of the
round; attackers who do not alarm sit in a reference that an honest majority still dominates.
The margin below the median is the largest of the paper's relative one, ``z`` standard errors
of a difference of two root-set accuracies (wider on a small root set) and ``z`` robust standard
deviations of the reference accuracies (wider when honest models legitimately differ, as
single-device models of a non-IID population do: there the root-set accuracy of one device's
model says little, and the direction test does the work).

:func:`screen_robust` also bounds each row's update norm, which the paper does not: a row whose
norm is more than ``norm_ratio`` (default 10) times the reference rows' median norm fails
(``"abnormal-norm"``). Neither the accuracy nor the direction test sees a huge update early on:
at round 0 every model scores near chance on the root set, and a noise update's cosine with the
reference is a coin flip, so a finite Gaussian-noise row of norm ~1e30 could be kept and make
the global model non-finite. Kept within the bound, a row moves the aggregate by at most
``norm_ratio`` times its weight times the typical honest norm. Honest rows stay far below it:
measured (seed 0, ``benchmarks/robustness.py`` scenarios), the largest honest row of a screened
round was 3.1 times the reference median (siren, 40% label flip, 30 rounds) and 3.3 times
(crossdevice, 30% sign flip, 8 rounds).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from defenses.base import DefenseContext, UpdateBatch, full_models

#: verdict reasons of rows that fail the screening
ABNORMAL_ACCURACY = "abnormal-accuracy"
ABNORMAL_COSINE = "abnormal-cosine"
ABNORMAL_NORM = "abnormal-norm"


def screen(
    rows: np.ndarray, acc: np.ndarray, updates: torch.Tensor, client_ids: np.ndarray, cs: float
) -> tuple[dict[int, str], float]:
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


def root_accuracy(
    batch: UpdateBatch, ctx: DefenseContext, rows: np.ndarray, name: str
) -> np.ndarray:
    """Root-set accuracy of the full models of ``rows`` (one ``ctx.score_models`` call)."""
    assert ctx.score_models is not None
    sub = batch.subset(rows)
    acc = np.asarray(
        ctx.score_models(full_models(sub, ctx, name))["accuracy"], dtype=np.float64
    ).reshape(-1)
    if acc.shape != (len(rows),):
        raise ValueError(
            f"defense {name!r}: score_models must return one accuracy per row ({len(rows)})"
        )
    return acc


def difference_se(acc: float, n_root: int) -> float:
    """Standard error of the difference of two root-set accuracies near ``acc``:
    ``sqrt(2 acc (1 - acc) / n_root)`` (two independent binomial estimates on ``n_root``
    samples; models scored on the same root set err together, so this is an upper bound)."""
    p = min(max(float(acc), 0.0), 1.0)
    return math.sqrt(2.0 * p * (1.0 - p) / n_root)


def robust_margin(ref: float, acc: np.ndarray, n_root: int, cs: float, z: float) -> float:
    """How far below ``ref`` an accuracy may be: ``max(cs * ref, z * se, z * s)`` with ``se``
    :func:`difference_se` at ``ref`` and ``s = 1.4826 * MAD(acc)`` the honest spread of the
    reference accuracies ``acc`` (normal-consistent median absolute deviation; 0 for fewer
    than 2 values)."""
    a = np.asarray(acc, np.float64)
    spread = 1.4826 * float(np.median(np.abs(a - np.median(a)))) if len(a) > 1 else 0.0
    return max(cs * ref, z * difference_se(ref, n_root), z * spread)


def margin_of(
    kind: str, n_root: int | None, cs: float, z: float
) -> Callable[[float, np.ndarray], float]:
    """The screening's accuracy margin below a reference ``ref`` of some accuracies ``acc``:
    ``cs * ref`` (``kind`` ``"paper"``, or no root set size) or :func:`robust_margin`."""
    if kind == "paper" or n_root is None:
        return lambda ref, acc: cs * ref
    return lambda ref, acc: robust_margin(ref, acc, n_root, cs, z)


def screen_robust(
    rows: np.ndarray,
    acc: np.ndarray,
    updates: torch.Tensor,
    client_ids: np.ndarray,
    alarm: np.ndarray,
    n_root: int,
    cs: float,
    z: float,
    norm_ratio: float = 10.0,
) -> tuple[dict[int, str], float]:
    """Screening against the non-alarmers' median and mean update (ours; module docstring).

    The *reference rows* are the rows of ``rows`` with a finite accuracy that raised no alarm
    (all rows with a finite accuracy when every one alarmed): the rows nobody has reason to
    suspect define what a normal model looks like, and every row, alarmer or not, is judged
    against them on its own scores. With ``ref`` their median accuracy (``np.median``: the mean
    of the two middle values of an even count):

    - row ``k`` is abnormal by accuracy when ``acc_k < ref - robust_margin(ref, ...)`` (of the
      reference accuracies) or its accuracy is not finite;
    - otherwise it is abnormal by norm (``"abnormal-norm"``; not in the paper) when the float64
      norm of its update exceeds ``norm_ratio`` times the median norm of the reference rows
      (no norm test when that median is 0 or ``norm_ratio`` is ``inf``);
    - otherwise it is abnormal by direction when its update has a non-positive float64 dot
      product with the mean update of the reference rows within the norm bound (no direction
      test when that mean is zero; the mean is summed in client-id order, so it does not depend
      on row order).

    Returns ``({row: reason}, ref)``; an empty set, or one without a finite accuracy, has
    reference ``-inf`` (every row of the latter is abnormal).
    """
    rows = np.asarray(rows, dtype=np.int64)
    finite = np.array([int(r) for r in rows if math.isfinite(acc[r])], dtype=np.int64)
    if not len(finite):
        return {int(r): ABNORMAL_ACCURACY for r in rows}, -math.inf
    quiet = finite[~np.asarray(alarm, bool)[finite]]
    refs = quiet if len(quiet) else finite
    ref = float(np.median(acc[refs]))
    bar = ref - robust_margin(ref, acc[refs], n_root, cs, z)
    norm = {int(r): float(torch.linalg.vector_norm(updates[r].double())) for r in rows}
    typical = float(np.median([norm[int(r)] for r in refs]))
    cap = norm_ratio * typical if typical > 0.0 else math.inf
    refs = refs[np.lexsort((refs, client_ids[refs]))]
    refs = refs[np.array([norm[int(r)] <= cap for r in refs], bool)]  # ratio >= 1: not empty
    u_ref = updates[torch.from_numpy(refs)].double().mean(0)
    check_cos = bool(torch.any(u_ref != 0))
    out: dict[int, str] = {}
    for r in (int(r) for r in rows):
        if not math.isfinite(acc[r]) or acc[r] < bar:
            out[r] = ABNORMAL_ACCURACY
        elif norm[r] > cap:
            out[r] = ABNORMAL_NORM
        elif check_cos and float(updates[r].double() @ u_ref) <= 0.0:
            out[r] = ABNORMAL_COSINE
    return out, ref
