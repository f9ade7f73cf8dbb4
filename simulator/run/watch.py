"""A round hook that says, once, when a run stops learning.

Non-finite updates are rejected row by row (verdict reason ``non-finite``) and a run goes on:
an attack study may want the collapse recorded. But a run whose every update is non-finite (a
learning rate far too large), or whose global model has become inf or NaN (an update too large
for float32 that the defense let through), learns nothing from then on while the progress bar
and the exit code look ordinary. :class:`NonFiniteWatch` logs one warning for each, at the
first round it happens. It also warns once when the defense has kept no update for
:data:`REJECT_STREAK` rounds in a row (Sageflow's absolute entropy threshold below an untrained
model's entropy, say): the model has not moved since, which the exit code does not show.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

log = logging.getLogger("simulator")

#: rounds in a row with every update rejected (for another reason than non-finite) before the
#: watch says so
REJECT_STREAK = 3


class NonFiniteWatch:
    """Warn (once each) when a round's every update was non-finite, when the global model
    stops being finite, and when the defense kept nothing for :data:`REJECT_STREAK` rounds."""

    def __init__(self) -> None:
        self.all_rejected: int | None = None  # the first round whose every update was
        self.model_broken: int | None = None  # the first round after which the model is not
        self.streak: list[int] = []  # the rounds in a row that kept no update, so far
        self.none_kept: int | None = None  # the round the streak was said at

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
        self._watch_rejections(sim, rnd, verdicts)
        flat = getattr(sim, "global_flat", None)
        if self.model_broken is None and flat is not None and not bool(torch.isfinite(flat).all()):
            self.model_broken = rnd
            log.warning(
                "round %d: the global model is no longer finite (inf or NaN: an update too "
                "large for float32 got through the defense); the rounds after it cannot learn",
                rnd,
            )

    def _watch_rejections(self, sim: Any, rnd: int, verdicts: list[dict[str, Any]]) -> None:
        if not verdicts:  # an empty round neither breaks nor extends a streak
            return
        reasons = [str(v.get("reason", "")) for v in verdicts]
        if any(v.get("kept") for v in verdicts) or all(r == "non-finite" for r in reasons):
            self.streak = []
            return
        self.streak.append(rnd)
        if self.none_kept is not None or len(self.streak) < REJECT_STREAK:
            return
        self.none_kept = rnd
        common = max(sorted(set(reasons)), key=reasons.count)
        cfg = getattr(sim, "cfg", None)
        name = getattr(getattr(cfg, "defense", None), "defense", None)
        log.warning(
            "rounds %d-%d: the defense%s kept none of the updates (most often: %r), so the "
            "model did not move in them; check its parameters (--defense-params); later rounds "
            "are not reported again",
            self.streak[0],
            rnd,
            f" {name!r}" if name else "",
            common,
        )


def warn_untrained_global(cfg: Any, algorithm: Any) -> bool:
    """Warn (and return True) when ``algorithm`` keeps no global model that learns and the run
    scores no client with its own model: its accuracy figures would all be an untrained
    model's (found at stop 57: KT-pFL on the defaults reported ~0.1 with exit 0)."""
    if algorithm.learns_global or cfg.data.client_test_fraction > 0:
        return False
    log.warning(
        "%s keeps no global model that learns: final_accuracy will be an untrained model's; "
        "give --client-test-fraction > 0 to score each client with its own model",
        algorithm.name,
    )
    return True
