"""Siren's variants (``defenses/siren.py``): the parts each variant stands for (alarm,
screening, decision rule, weighting) with their choices, and the screening a round uses."""

from __future__ import annotations

import numpy as np

from defenses.base import DefenseContext, UpdateBatch
from defenses.siren_rules import Screen
from defenses.siren_screen import screen, screen_robust

#: the parts a variant stands for, with their choices
PARTS = (
    ("alarm", ["mcnemar", "paper"]),
    ("screen", ["robust", "paper"]),
    ("rule", ["population", "paper"]),
    ("weighting", ["samples", "uniform"]),
)
#: the variants and the (alarm, screen, rule, weighting) each stands for
VARIANTS = {
    "calibrated": ("mcnemar", "robust", "population", "samples"),
    "paper": ("paper", "paper", "paper", "uniform"),
}


def screening_of(
    kind: str,
    batch: UpdateBatch,
    ctx: DefenseContext,
    acc: np.ndarray,
    alarm: np.ndarray,
    cs: float,
    z: float,
    norm_ratio: float = 10.0,
) -> Screen:
    """The round's screening of a set of rows: :func:`~defenses.siren_screen.screen`
    (``kind="paper"``) or :func:`~defenses.siren_screen.screen_robust` (``"robust"``), with
    the server margin ``cs`` and the robust screening's ``z`` and ``norm_ratio``."""
    if kind == "paper":
        return lambda rows: screen(rows, acc, batch.updates, batch.client_ids, cs)
    assert ctx.public_y is not None
    n_root = len(ctx.public_y)
    return lambda rows: screen_robust(
        rows, acc, batch.updates, batch.client_ids, alarm, n_root, cs, z, norm_ratio
    )
