"""A round hook that says, once, when a run stops learning for numerical reasons.

Non-finite updates are rejected row by row (verdict reason ``non-finite``) and a run goes on:
an attack study may want the collapse recorded. But a run whose every update is non-finite (a
learning rate far too large), or whose global model has become inf or NaN (an update too large
for float32 that the defense let through), learns nothing from then on while the progress bar
and the exit code look ordinary. :class:`NonFiniteWatch` logs one warning for each, at the
first round it happens.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

log = logging.getLogger("simulator")


class NonFiniteWatch:
    """Warn (once each) when a round's every update was non-finite, and when the global model
    stops being finite."""

    def __init__(self) -> None:
        self.all_rejected: int | None = None  # the first round whose every update was
        self.model_broken: int | None = None  # the first round after which the model is not

    def on_round_end(self, sim: Any, record: Any) -> None:
        rnd, verdicts = int(record.round), record.verdicts
        if (
            self.all_rejected is None
            and verdicts
            and all(v.get("reason") == "non-finite" for v in verdicts)
        ):
            self.all_rejected = rnd
            log.warning(
                "round %d: all %d updates were non-finite and rejected, so the model did not "
                "move (a learning rate too large?); later rounds are not reported again",
                rnd,
                len(verdicts),
            )
        flat = getattr(sim, "global_flat", None)
        if self.model_broken is None and flat is not None and not bool(torch.isfinite(flat).all()):
            self.model_broken = rnd
            log.warning(
                "round %d: the global model is no longer finite (inf or NaN: an update too "
                "large for float32 got through the defense); the rounds after it cannot learn",
                rnd,
            )
