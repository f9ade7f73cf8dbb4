"""Defenses (aggregation rules), one module each, registered by name."""

from __future__ import annotations

import inspect
from typing import Any

from defenses.base import (
    AggregateResult,
    Defense,
    DefenseContext,
    PreconditionError,
    UpdateBatch,
    Verdict,
    screen_malformed,
    weighted_mean,
)
from defenses.bucketing import BUCKETABLE, check_bucket
from defenses.bulyan import BulyanDefense
from defenses.centeredclip import CenteredClipDefense
from defenses.fedavg import FedAvgDefense
from defenses.fltrust import FLTrustDefense
from defenses.geomed import GeoMedDefense
from defenses.krum import KrumDefense, MultiKrumDefense
from defenses.median import MedianDefense
from defenses.normclip import NormClipDefense
from defenses.sageflow import SageflowDefense
from defenses.siren import SirenDefense
from defenses.trimmedmean import TrimmedMeanDefense

DEFENSES: dict[str, type[Defense]] = {
    cls.name: cls for cls in (
        FedAvgDefense, KrumDefense, MultiKrumDefense, MedianDefense, TrimmedMeanDefense,
        GeoMedDefense, NormClipDefense, CenteredClipDefense, BulyanDefense, SageflowDefense,
        SirenDefense, FLTrustDefense)
}


def make_defense(name: str, **params: Any) -> Defense:
    """Build a registered defense; unknown names or parameters list the valid ones.

    Every rule of :data:`defenses.bucketing.BUCKETABLE` also takes ``bucket=S`` (average random
    buckets of S rows before the rule; Karimireddy et al., ICLR 2022).
    """
    if name not in DEFENSES:
        raise ValueError(f"defense: unknown {name!r}; valid: {sorted(DEFENSES)}")
    cls = DEFENSES[name]
    valid = [p.name for p in inspect.signature(cls.__init__).parameters.values()
             if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    if name in BUCKETABLE:
        valid.append("bucket")
    for p in params:
        if p not in valid:
            raise ValueError(f"defense {name!r}: unknown parameter {p!r}; valid: {valid}")
    bucket = check_bucket(name, params.pop("bucket", 1))
    rule = cls(**params)
    rule.bucket = bucket
    return rule


__all__ = ["DEFENSES", "AggregateResult", "Defense", "DefenseContext", "PreconditionError",
           "UpdateBatch", "Verdict",
           "make_defense", "screen_malformed", "weighted_mean"]
