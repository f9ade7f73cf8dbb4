"""What a heterogeneity case is (:class:`Case`, :class:`Comparison`, the metrics) and the
registry :data:`CASES` that every case file registers its case in.

A case declares

* ``name`` and ``claim``: its ``--case`` name and the seed's claim in one line;
* ``base``: flat config overrides (``simulator.config.sections.build_config(flat=...)``) shared by
  every arm: dataset, partition, model, local training;
* ``arms``: arm name -> flat overrides of that arm (algorithm, its parameters, stragglers, ...);
* ``comparisons``: which arm is compared with which baseline arm, on which metric
  (:data:`METRICS`) and in which direction the seed predicts (``higher`` / ``lower``);
  :func:`versus` builds the usual "every method against one baseline" list;
* ``quick`` and ``full``: the overrides of the two run sizes (rounds, clients, epochs);
* ``arm_quick`` and ``arm_full`` (optional): arm name -> that arm's own overrides of the run
  size, for a case whose arms run at different sizes (the ``moon`` case's CNN arms);
* ``scores`` (optional): metric name (one of :data:`SCORED_METRICS`) -> a module-level function
  of a finished run's directory returning a number, for a metric no run summary has (FedFM's
  feature silhouette). The harness calls it in the worker right after the run.

A run's flat config is ``RUN_DEFAULTS | base | quick-or-full | arm | arm_quick-or-arm_full[arm]
| {seed, out}``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator.registry import Registry

#: comparable quantities: name -> what it is. Per-run metrics are read from the run's summary
#: (the last evaluated round); ``rounds_to_baseline`` pairs each method run with the baseline
#: run of the same seed.
METRICS: dict[str, str] = {
    "final_accuracy": "global model's test accuracy after the last round",
    "last5_accuracy": "mean global test accuracy over the last 5 evaluations",
    "final_loss": "global model's test loss after the last round",
    "client_accuracy_mean": "mean accuracy of the clients on their own local test splits "
    "(each with its kept-local entries, e.g. FedBN's BatchNorm)",
    "client_accuracy_std": "standard deviation of the clients' local test accuracies",
    "client_accuracy_worst10": "mean of the lowest 10% (at least one) client accuracies",
    "rounds_to_baseline": "first round (1-based) whose global test accuracy reaches the "
    "baseline's final accuracy of the same seed (rounds + 1 if never)",
    "upload_volume": "bytes the clients uploaded over the bytes the same uploads take "
    "uncompressed (1 without --compression; a fraction of FedAvg's)",
    "feature_silhouette": "silhouette score (test labels as clusters, euclidean) of the final "
    "global model's test-set features (a case's ``scores`` computes it)",
    "class_affinity": "share of the clients whose knowledge coefficients (KT-pFL's final c) "
    "weigh the peers sharing a class with them more, on average, than the other peers (a "
    "case's ``scores`` computes it)",
}
#: metrics no run summary has: a case comparing on one computes it with its ``scores``
SCORED_METRICS = ("feature_silhouette", "class_affinity")

DIRECTIONS = ("higher", "lower")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


class CaseError(ValueError):
    """A malformed case declaration (raised when its file is imported)."""


@dataclass(frozen=True)
class Comparison:
    """One verdict: ``method`` arm against ``baseline`` arm on ``metric``, the seed predicting
    the method ``direction`` (higher or lower) than the baseline, by at least ``margin`` (in the
    metric's units, signed so that positive is the predicted direction: "+2 points or more" is
    0.02, "at most 6 points lost" is -0.06; 0: strictly ahead)."""

    method: str
    baseline: str
    metric: str = "final_accuracy"
    direction: str = "higher"
    margin: float = 0.0

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise CaseError(
                f"comparison {self.method} vs {self.baseline}: unknown metric "
                f"{self.metric!r}; valid: {sorted(METRICS)}"
            )
        if self.direction not in DIRECTIONS:
            raise CaseError(
                f"comparison {self.method} vs {self.baseline}: direction must be "
                f"one of {list(DIRECTIONS)}, got {self.direction!r}"
            )


def versus(
    baseline: str, methods: list[str], metric: str = "final_accuracy", direction: str = "higher"
) -> tuple[Comparison, ...]:
    """Every arm of ``methods`` against ``baseline`` on one metric and direction."""
    return tuple(Comparison(m, baseline, metric, direction) for m in methods)


@dataclass(frozen=True)
class Case:
    """A seed claim and the runs that check it (see the module docstring)."""

    name: str
    claim: str
    base: dict[str, Any]
    arms: dict[str, dict[str, Any]]
    comparisons: tuple[Comparison, ...]
    quick: dict[str, Any] = field(default_factory=dict)
    full: dict[str, Any] = field(default_factory=dict)
    scores: dict[str, Callable[[Path], float]] = field(default_factory=dict)
    arm_quick: dict[str, dict[str, Any]] = field(default_factory=dict)
    arm_full: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise CaseError(f"case name {self.name!r}: lower-case letters, digits, _ . - only")
        if not self.arms or not self.comparisons:
            raise CaseError(f"case {self.name}: needs at least one arm and one comparison")
        for c in self.comparisons:
            for arm in (c.method, c.baseline):
                if arm not in self.arms:
                    raise CaseError(
                        f"case {self.name}: comparison names unknown arm {arm!r}; "
                        f"arms: {list(self.arms)}"
                    )
        for arm in [*self.arm_quick, *self.arm_full]:
            if arm not in self.arms:
                raise CaseError(
                    f"case {self.name}: arm sizes name unknown arm {arm!r}; arms: {list(self.arms)}"
                )
        for m in self.scores:
            if m not in SCORED_METRICS:
                raise CaseError(
                    f"case {self.name}: scores names {m!r}; valid: {list(SCORED_METRICS)}"
                )
        for c in self.comparisons:
            if c.metric in SCORED_METRICS and c.metric not in self.scores:
                raise CaseError(
                    f"case {self.name}: comparison {c.method} vs {c.baseline} on "
                    f"{c.metric!r} needs scores[{c.metric!r}]"
                )
        bad = sorted(
            {"seed", "out"}
            & (
                set(self.base)
                | set(self.quick)
                | set(self.full)
                | {k for a in self.arms.values() for k in a}
                | {k for a in [*self.arm_quick.values(), *self.arm_full.values()] for k in a}
            )
        )
        if bad:
            raise CaseError(f"case {self.name}: {bad[0]!r} is set by the harness, not a case")

    def flat(self, arm: str, quick: bool) -> dict[str, Any]:
        """The arm's flat config overrides (without seed and out)."""
        return {
            **RUN_DEFAULTS,
            **self.base,
            **(self.quick if quick else self.full),
            **self.arms[arm],
            **(self.arm_quick if quick else self.arm_full).get(arm, {}),
        }


#: set on every run: in-process training, no per-run progress bars or plots
RUN_DEFAULTS: dict[str, Any] = {"backend": "local", "progress": False, "plots": False}


#: every registered case by name; a case file registers its :class:`Case` with
#: ``CASES.register(Case(...))`` and ``benchmarks.heterogeneity_study.cases`` discovers the files
CASES: Registry[Case] = Registry("heterogeneity case")
