"""The defense interface: a function of the round's update batch that returns an aggregate and a
per-client verdict.

A defense sees an :class:`UpdateBatch` (the ``[K, P]`` matrix of updates that arrived this round,
with sample counts, base rounds and client signals) and a :class:`DefenseContext` (round, global
model, server-held public data, an evaluation function). It returns an :class:`AggregateResult`:
the aggregated update ``delta`` (``[P]``) and one :class:`Verdict` per row. State that a defense
keeps across rounds (Siren's credits, Sageflow's staleness groups) lives on the defense object and
is exposed through ``state_dict`` / ``load_state_dict`` for checkpoints.

Every rule is one module of this package whose class is decorated with ``@DEFENSES.register``
(its ``name``); the package discovers its modules, so adding a rule touches no other file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from simulator.registry import Registry, check_params


class PreconditionError(ValueError):
    """A rule's precondition on the round's rows fails (Krum needs ``n > 2f + 2``, ...).

    The engine turns it into a skipped round: every row is rejected with reason
    ``"precondition: <what is needed>"`` and the global model does not move (never a silent
    clamp of ``f``). A configuration whose every round would fail is refused before the run
    starts (:meth:`Defense.precondition` on the cohort size).
    """


@dataclass(frozen=True)
class UpdateBatch:
    """The rows aggregated this round."""

    updates: torch.Tensor  # [K, P] float32
    client_ids: np.ndarray  # [K] int64
    num_samples: np.ndarray  # [K] int64
    base_rounds: np.ndarray  # [K] int64, round of the global model each row built on
    signals: dict[str, np.ndarray] = field(default_factory=dict)  # e.g. "loss", "alarm"

    def __len__(self) -> int:
        return int(self.updates.shape[0])

    def subset(self, rows: np.ndarray) -> UpdateBatch:
        """The batch restricted to ``rows`` (positions); the batch itself when ``rows`` is every
        row in order (no copy: at cohort scale a copy of the matrix costs tens of ms)."""
        r = np.asarray(rows, dtype=np.int64)
        if len(r) == len(self) and np.array_equal(r, np.arange(len(self))):
            return self
        return UpdateBatch(
            self.updates[torch.from_numpy(r)],
            self.client_ids[r],
            self.num_samples[r],
            self.base_rounds[r],
            {k: v[r] for k, v in self.signals.items()},
        )


@dataclass(frozen=True)
class Verdict:
    """What the server decided about one client's update this round."""

    client_id: int
    kept: bool
    weight: float  # share of the aggregate (0 when rejected); weights of kept rows sum to 1
    score: float  # defense-specific score (distance, entropy, accuracy, ...); nan if none
    reason: str = ""  # why rejected (or a short note)

    def to_dict(self) -> dict[str, Any]:
        return {
            "client": self.client_id,
            "kept": self.kept,
            "weight": round(self.weight, 8),
            "score": None if np.isnan(self.score) else float(self.score),
            "reason": self.reason,
        }


@dataclass(frozen=True)
class DefenseContext:
    """What a defense may read besides the updates."""

    round: int
    global_flat: torch.Tensor
    public_x: torch.Tensor | None = None
    public_y: torch.Tensor | None = None
    evaluate: Callable[[torch.Tensor], tuple[float, float]] | None = None  # flat -> (acc, loss)
    rng: np.random.Generator | None = None
    #: scores each row of a ``[K, P]`` matrix of full model vectors on the server's public set:
    #: ``{"accuracy": [K], "loss": [K], "entropy": [K]}`` (mean softmax entropy, nats); None when
    #: the run has no public set (``--public-fraction 0``)
    score_models: Callable[[torch.Tensor], dict[str, np.ndarray]] | None = None
    #: the global model of an earlier round (the base a stale row was trained from): a row's full
    #: model is ``base_model(base_round) + update``; kept for ``max_staleness`` rounds
    base_model: Callable[[int], torch.Tensor] | None = None
    #: the server's own update this round: the global model trained on the public/root set with
    #: the clients' optimizer and local epochs (FLTrust); None without a public set
    server_update: Callable[[], torch.Tensor] | None = None


@dataclass(frozen=True)
class AggregateResult:
    delta: torch.Tensor  # [P]
    verdicts: tuple[Verdict, ...]


class Defense:
    """Base class: subclasses implement :meth:`aggregate`; parameters are keyword arguments."""

    name = "base"
    #: the rule reads only its rows (no public set, signals or stale bases), so it also takes
    #: ``bucket=S``; True on the subclasses of :class:`defenses.bucketing.BucketableDefense`
    bucketable = False
    #: a linear rule's aggregate is sum_k w_k u_k / sum_k w_k with weights known before training
    #: (``row_weights``); the engine may then pre-aggregate rows on the actors.
    linear = False
    #: the class of the rule's client side (what runs on the clients before and after training,
    #: e.g. Siren's alarm), built by the engine with ``client_side()``; None: the rule is
    #: server-only
    client_side: type | None = None
    #: what the rule can judge: rows that are model updates (``"update"``), rows of another
    #: upload (an algorithm's :attr:`~simulator.algorithms.base.Algorithm.upload` name), or
    #: ``"*"`` for any row (a plain weighted mean)
    uploads: tuple[str, ...] = ("update",)

    def row_weights(self, num_samples: np.ndarray) -> np.ndarray:
        """Unnormalized weights of a linear rule; only called when ``linear`` is True."""
        raise NotImplementedError

    def __init__(self, **params: Any) -> None:
        check_params(f"defense {self.name!r}", params, [])

    def aggregate(self, batch: UpdateBatch, ctx: DefenseContext) -> AggregateResult:
        raise NotImplementedError

    def precondition(self, n: int) -> str | None:
        """What the rule needs of a round with ``n`` rows, when ``n`` does not meet it
        (e.g. ``"n > 2f + 2 (n=4, f=1)"``); None when ``n`` rows are fine (the default)."""
        del n
        return None

    def check_rows(self, n: int) -> None:
        """Raise :class:`PreconditionError` ``defense 'NAME': needs ...`` when ``n`` rows break
        :meth:`precondition`."""
        why = self.precondition(n)
        if why is not None:
            raise PreconditionError(f"defense {self.name!r}: needs {why}")

    def rule_precondition(self, n: int) -> str | None:
        """:meth:`precondition` of a round with ``n`` rows as the rule will see them (a
        bucketable rule counts its buckets)."""
        return self.precondition(n)

    def __call__(self, batch: UpdateBatch, ctx: DefenseContext) -> AggregateResult:
        if len(batch) == 0:
            return AggregateResult(torch.zeros(batch.updates.shape[1], dtype=torch.float32), ())
        return self.aggregate(batch, ctx)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state


#: every defense by name; a rule's module registers its class with ``@DEFENSES.register``
DEFENSES: Registry[type[Defense]] = Registry("defense")


def check_choice(rule: str, param: str, value: Any, valid: Sequence[str]) -> str:
    """``value`` if it is one of ``valid``; else ValueError listing the valid values."""
    if not isinstance(value, str) or value not in valid:
        raise ValueError(f"defense {rule!r}: {param} {value!r} invalid; valid: {list(valid)}")
    return value


def check_weighting(rule: str, value: Any) -> str:
    """A rule's ``weighting``: ``"uniform"`` (each row once, as the papers do) or
    ``"samples"`` (rows weighted by their sample counts, as FedAvg does)."""
    return check_choice(rule, "weighting", value, ("samples", "uniform"))


def weighted_mean(updates: torch.Tensor, weights: np.ndarray) -> torch.Tensor:
    """Sum_k w_k u_k / sum_k w_k; an all-zero weight vector gives the zero update."""
    w = torch.as_tensor(np.asarray(weights, dtype=np.float64), dtype=torch.float64)
    total = float(w.sum())
    if total <= 0:
        return torch.zeros(updates.shape[1], dtype=updates.dtype)
    return ((w / total).to(updates.dtype) @ updates).to(updates.dtype)


def finite_rows(updates: torch.Tensor) -> torch.Tensor:
    """``[K]`` bool: which rows of a ``[K, P]`` float32 matrix hold only finite numbers.

    A float32 row sum is finite when every entry is and the sum does not overflow; the rows
    whose float32 sum is not finite (a NaN/Inf, or finite values too large to add up) are
    checked entry by entry, so one cheap reduction decides the usual case exactly. The one test
    of row health: the actors use it before adding rows into a partial sum,
    :func:`screen_malformed` before a defense sees them.
    """
    ok = torch.isfinite(updates.sum(dim=1))
    if not bool(ok.all()):
        bad = torch.nonzero(~ok).flatten()
        ok[bad] = torch.isfinite(updates[bad]).all(dim=1)
    return ok


def screen_malformed(batch: UpdateBatch, size: int) -> tuple[np.ndarray, list[Verdict]]:
    """Rows that may be aggregated, and rejection verdicts for the others.

    A row with NaN/Inf or the wrong length is never averaged; the engine calls this before any
    defense sees the batch.
    """
    if batch.updates.dim() != 2 or batch.updates.shape[1] != size:
        return np.zeros(0, np.int64), [
            Verdict(int(c), False, 0.0, float("nan"), "bad-shape") for c in batch.client_ids
        ]
    finite = finite_rows(batch.updates).numpy()
    bad = [
        Verdict(int(c), False, 0.0, float("nan"), "non-finite")
        for c, ok in zip(batch.client_ids, finite, strict=True)
        if not ok
    ]
    return np.flatnonzero(finite), bad


def base_models(batch: UpdateBatch, ctx: DefenseContext, name: str) -> torch.Tensor:
    """``[K, P]``: the global model each row trained from (stale rows use ``ctx.base_model``;
    fresh rows fall back to ``ctx.global_flat`` when there is no history)."""
    bases = {}
    for tau in sorted({int(b) for b in batch.base_rounds}):
        if tau > ctx.round:
            raise ValueError(
                f"defense {name!r}: base round {tau} is after the current round {ctx.round}"
            )
        if ctx.base_model is not None:
            bases[tau] = ctx.base_model(tau)
        elif tau == ctx.round:
            bases[tau] = ctx.global_flat
        else:
            raise ValueError(f"defense {name!r}: stale rows need ctx.base_model")
    return torch.stack([bases[int(b)].to(batch.updates.dtype) for b in batch.base_rounds])


def full_models(batch: UpdateBatch, ctx: DefenseContext, name: str) -> torch.Tensor:
    """``[K, P]`` full models of the rows: :func:`base_models` plus each row's update."""
    return base_models(batch, ctx, name) + batch.updates
