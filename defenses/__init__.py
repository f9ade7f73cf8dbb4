"""Defenses (aggregation rules), one module each, registered by name.

Every module of this package is imported when the package is; a rule is added by dropping one
file here whose class is decorated with ``@DEFENSES.register`` (:data:`defenses.base.DEFENSES`),
and nothing else changes. Modules that hold no rule (``distances``, ``siren_screen``, ...) simply
register nothing.
"""

from __future__ import annotations

import inspect
from typing import Any

from defenses.base import (
    DEFENSES,
    AggregateResult,
    Defense,
    DefenseContext,
    PreconditionError,
    UpdateBatch,
    Verdict,
    screen_malformed,
    weighted_mean,
)
from defenses.bucketing import BucketableDefense, check_bucket
from defenses.nnm import check_nnm, check_rank
from simulator.registry import check_params


def make_defense(name: str, **params: Any) -> Defense:
    """Build a registered defense; unknown names or parameters list the valid ones.

    Every bucketable rule (``bucketable`` True: the subclasses of
    :class:`defenses.bucketing.BucketableDefense`) also takes ``bucket=S`` (average random
    buckets of S rows before the rule; Karimireddy et al., ICLR 2022) or ``nnm=F`` (replace
    each row by the mean of its n - F nearest rows; Allouah et al., AISTATS 2023) with
    ``nnm_rank`` ``"distance"`` (the paper's) or ``"angle"`` (:mod:`defenses.nnm`; read only
    when ``nnm >= 1``, so that it can be set over a preset that mixes).
    """
    if name not in DEFENSES:
        raise ValueError(f"defense: unknown {name!r}; valid: {sorted(DEFENSES)}")
    cls = DEFENSES[name]
    valid = [
        p.name
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    ]
    if cls.bucketable:
        valid += ["bucket", "nnm", "nnm_rank"]
    check_params(f"defense {name!r}", params, valid)
    bucket = check_bucket(name, params.pop("bucket", 1))
    nnm = check_nnm(name, params.pop("nnm", 0))
    rank = check_rank(name, params.pop("nnm_rank", "distance"))
    if bucket > 1 and nnm > 0:
        raise ValueError(
            f"defense {name!r}: bucket={bucket} and nnm={nnm} both set; valid: one of them"
        )
    rule = cls(**params)
    if isinstance(rule, BucketableDefense):
        rule.bucket, rule.nnm, rule.nnm_rank = bucket, nnm, rank
    return rule


DEFENSES.discover(__name__)

__all__ = [
    "DEFENSES",
    "AggregateResult",
    "Defense",
    "DefenseContext",
    "PreconditionError",
    "UpdateBatch",
    "Verdict",
    "make_defense",
    "screen_malformed",
    "weighted_mean",
]
