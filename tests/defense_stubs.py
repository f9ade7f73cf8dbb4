"""Stubs shared by the tests of defenses that score models on the server's public set
(Sageflow, Siren): a fixed scorer and a context with a global-model history."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from defenses import DefenseContext, UpdateBatch

Scorer = Callable[[torch.Tensor], dict[str, np.ndarray]]


def stub_scorer(
    accuracy: list[float],
    loss: list[float],
    entropy: list[float],
    expect: list[list[float]] | None = None,
    seen: list[torch.Tensor] | None = None,
) -> Scorer:
    """Returns the given scores in row order; checks it got the full ``[K, P]`` models
    (``expect``) and records what it was given (``seen``)."""

    def score(models: torch.Tensor) -> dict[str, np.ndarray]:
        assert models.dim() == 2 and models.shape[0] == len(accuracy)
        if expect is not None:
            torch.testing.assert_close(models, torch.tensor(expect), rtol=0, atol=1e-6)
        if seen is not None:
            seen.append(models.clone())
        return {
            "accuracy": np.array(accuracy, np.float64),
            "loss": np.array(loss),
            "entropy": np.array(entropy),
        }

    return score


def ctx_of(
    score: Scorer | None, rnd: int = 0, bases: dict[int, list[float]] | None = None
) -> DefenseContext:
    """A context at round ``rnd`` whose global-model history is ``bases`` (default zeros)."""
    bases = bases or {rnd: [0.0, 0.0]}
    table = {r: torch.tensor(b) for r, b in bases.items()}
    return DefenseContext(
        round=rnd, global_flat=table[rnd], score_models=score, base_model=table.__getitem__
    )


def batch_of(
    rows: list[list[float]],
    samples: list[int],
    taus: list[int] | None = None,
    ids: list[int] | None = None,
    signals: dict[str, np.ndarray] | None = None,
) -> UpdateBatch:
    """Float32 rows with their sample counts; base rounds ``taus`` (default 0), client ids
    ``ids`` (default 0..n-1) and named ``signals`` (e.g. ``"alarm"``)."""
    n = len(rows)
    return UpdateBatch(
        torch.tensor(rows, dtype=torch.float32),
        np.array(ids if ids is not None else range(n), np.int64),
        np.array(samples, np.int64),
        np.array(taus if taus is not None else [0] * n, np.int64),
        signals or {},
    )


def fixed_scorer(
    entropy: list[float],
    loss: list[float],
    expect: list[list[float]] | None = None,
    seen: list[torch.Tensor] | None = None,
) -> Scorer:
    """Returns the given entropies and losses; checks it got the full ``[K, P]`` models."""
    return stub_scorer([0.0] * len(entropy), loss, entropy, expect, seen)
