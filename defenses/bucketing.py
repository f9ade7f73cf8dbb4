"""Bucketing: a robust rule applied to averages of small random buckets of rows.

References
----------
S. P. Karimireddy, L. He, M. Jaggi. "Byzantine-Robust Learning on Heterogeneous Datasets via
Bucketing". ICLR 2022.

Under heterogeneous (non-IID) clients the benign rows are far apart, and a rule that selects or
takes coordinate-wise order statistics (Krum, median, trimmed mean) then discards much of the
benign signal. Averaging random buckets of ``s`` rows first shrinks the benign spread by about
``sqrt(s)`` while at most ``f`` buckets hold an attacker.

Departures from the paper: rows are averaged with their sample counts as weights (the paper
averages uniformly; weighted buckets keep FedAvg's weighting inside a bucket) and a bucket's
sample count is the sum of its rows'. The random permutation is drawn from the round's defense
stream after sorting rows by client id, so the buckets do not depend on arrival order. A
bucket stands for its smallest client id in the rule's tie-breaks.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from defenses.base import (
    AggregateResult,
    Defense,
    DefenseContext,
    PreconditionError,
    UpdateBatch,
    Verdict,
)
from defenses.nnm import mixed, nnm_precondition

#: buckets a bucketed round needs: a rule (median, trimmed mean, Krum, ...) of one or two
#: bucket means is their mean, no defense at all
MIN_BUCKETS = 3


class BucketableDefense(Defense):
    """Base class of the rules that read only their rows (no public set, signals or stale
    bases): they also take ``bucket=S`` and then aggregate the means of random buckets of
    ``S`` rows (:func:`bucketed`), or ``nnm=F`` and then aggregate each row's mean with its
    ``n - F`` nearest rows (:func:`defenses.nnm.mixed`); not both."""

    bucketable = True
    #: rows averaged per bucket before the rule (``bucket=S``; 1 = no bucketing)
    bucket = 1
    #: Byzantine rows the nearest-neighbour mixing allows for (``nnm=F``; 0 = no mixing)
    nnm = 0
    #: how the mixing ranks neighbours (``nnm_rank``, :data:`defenses.nnm.NNM_RANKS`)
    nnm_rank = "distance"

    def rule_precondition(self, n: int) -> str | None:
        """:meth:`precondition` of a round with ``n`` rows, counted after bucketing (mixing
        keeps ``n`` rows and needs ``n > 2F`` itself)."""
        if self.nnm > 0 and (why := nnm_precondition(n, self.nnm)) is not None:
            return why
        b = rows_for_rule(n, self.bucket)
        if self.bucket > 1 and 0 < b < MIN_BUCKETS:  # found at stop 57: bucket=11 of 10 rows
            return (  # made one bucket, and the median a plain mean, without a word
                f"at least {MIN_BUCKETS} buckets (n={n} in buckets of {self.bucket} make {b}; "
                f"any rule of {b} bucket means is their mean)"
            )
        why = self.precondition(b)
        return why if why is None or self.bucket == 1 else f"{why} in buckets of {self.bucket}"

    def __call__(self, batch: UpdateBatch, ctx: DefenseContext) -> AggregateResult:
        if len(batch) > 0 and self.nnm > 0:
            return mixed(self, batch, ctx, self.nnm, self.nnm_rank)
        if len(batch) > 0 and self.bucket > 1:
            return bucketed(self, batch, ctx, self.bucket)
        return super().__call__(batch, ctx)


def check_bucket(rule: str, value: object) -> int:
    """The ``bucket`` parameter of a bucketable rule: an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"defense {rule!r}: bucket {value!r} invalid; valid: integer >= 1")
    return int(value)


def buckets(n: int, s: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A random partition of positions ``0..n-1`` into ``ceil(n / s)`` buckets of ``s`` (the
    last one smaller when ``s`` does not divide ``n``)."""
    perm = rng.permutation(n)
    return [np.sort(perm[i : i + s]) for i in range(0, n, s)]


def bucketed(rule: Defense, batch: UpdateBatch, ctx: DefenseContext, s: int) -> AggregateResult:
    """``rule`` on the sample-weighted means of random buckets of ``s`` rows; each client's
    verdict is its bucket's (kept, reason, score), its weight the bucket's weight times its
    share of the bucket's samples."""
    order = np.argsort(batch.client_ids, kind="stable")
    rng = ctx.rng if ctx.rng is not None else np.random.default_rng(ctx.round)
    groups = [order[g] for g in buckets(len(batch), s, rng)]
    x = batch.updates.double()
    samples = batch.num_samples.astype(np.float64)
    means, ids, counts, bases = [], [], [], []
    for g in groups:
        w = samples[g] / samples[g].sum() if samples[g].sum() > 0 else np.full(len(g), 1 / len(g))
        means.append(torch.from_numpy(w) @ x[torch.from_numpy(g)])
        ids.append(int(batch.client_ids[g].min()))
        counts.append(int(batch.num_samples[g].sum()))
        bases.append(int(batch.base_rounds[g].min()))
    inner = UpdateBatch(
        torch.stack(means).to(batch.updates.dtype),
        np.array(ids, np.int64),
        np.array(counts, np.int64),
        np.array(bases, np.int64),
    )
    try:
        res = rule.aggregate(inner, ctx)
    except PreconditionError as e:
        raise PreconditionError(f"{e} in buckets of {s}") from None
    out: dict[int, Verdict] = {}
    for g, v in zip(groups, res.verdicts, strict=True):
        total = samples[g].sum()
        for r in g.tolist():
            share = samples[r] / total if total > 0 else 1.0 / len(g)
            out[r] = Verdict(
                int(batch.client_ids[r]), v.kept, v.weight * float(share), v.score, v.reason
            )
    return AggregateResult(res.delta, tuple(out[r] for r in range(len(batch))))


def rows_for_rule(n: int, s: int) -> int:
    """Rows the rule sees when ``n`` rows are bucketed by ``s``."""
    return math.ceil(n / s)
