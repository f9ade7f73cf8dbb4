"""The adversary's side of a round: who is malicious, what model attacks send, and how well the
defense detected them.

Data attacks act inside training (the engine marks the malicious clients' tasks ``poisoned``);
model attacks rewrite the malicious clients' rows after training and receive the round's benign
rows explicitly through :class:`attacks.AttackContext`; nothing here reaches into engine state.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from attacks import AttackContext, pick_malicious, redraw_malicious
from attacks.base import Attack
from simulator.config.learning import AttackConfig
from simulator.round.types import InFlight


class Adversary:
    """Chooses the malicious clients and applies a model attack to their rows."""

    def __init__(
        self,
        attack: Attack | None,
        cfg: AttackConfig,
        num_clients: int,
        seed: int,
        independent: bool = False,
    ) -> None:
        self.attack, self.cfg = attack, cfg
        #: redraw: each selected client malicious on its own with the fraction's probability
        #: (an asynchronous policy, whose steps select a client or a few at a time)
        self.independent = independent
        self.fixed = (
            pick_malicious(num_clients, cfg.attack_fraction, seed)
            if attack is not None and cfg.malicious_mode == "fixed"
            else np.zeros(0, np.int64)
        )

    @property
    def is_model_attack(self) -> bool:
        return self.attack is not None and self.attack.kind == "model"

    @property
    def data_attack(self) -> Any:
        """What poisons the malicious clients' training: a data attack, or the data part of a
        model attack (model replacement trains on backdoored data, then boosts)."""
        if self.attack is None:
            return None
        return self.attack if self.attack.kind == "data" else getattr(self.attack, "data", None)

    @property
    def is_data_attack(self) -> bool:
        return self.data_attack is not None

    @property
    def trigger(self) -> Any:
        """The backdoor whose success rate is measured at evaluation, if any."""
        d = self.data_attack
        return d if d is not None and hasattr(d, "stamp") else None

    def malicious(self, selected: np.ndarray, rng: np.random.Generator) -> set[int]:
        """The malicious clients among this round's selected ones."""
        if self.attack is None:
            return set()
        if self.cfg.malicious_mode == "redraw":
            f = self.cfg.attack_fraction
            return {int(c) for c in redraw_malicious(selected, f, rng, self.independent)}
        # the fixed set is sorted: a binary search per selected client, O(cohort log F)
        pos = np.minimum(np.searchsorted(self.fixed, selected), max(len(self.fixed) - 1, 0))
        hit = self.fixed[pos] == selected if len(self.fixed) else np.zeros(len(selected), bool)
        return {int(c) for c in np.asarray(selected)[hit]}

    def rewrite(
        self,
        rnd: int,
        global_flat: torch.Tensor,
        rows: dict[int, InFlight],
        malicious: set[int],
        rng: np.random.Generator,
    ) -> None:
        """Replace the malicious rows computed this round by what the model attack sends."""
        if not self.is_model_attack:
            return
        bad = sorted(c for c in rows if c in malicious)
        if not bad:
            return
        good = sorted(c for c in rows if c not in malicious)
        p = global_flat.numel()
        benign = (
            torch.from_numpy(np.stack([rows[c].row for c in good])) if good else torch.zeros(0, p)
        )
        ctx = AttackContext(rnd, global_flat, benign, len(bad), len(rows), rng)
        sent = self.attack.apply(torch.from_numpy(np.stack([rows[c].row for c in bad])), ctx)
        for c, r in zip(bad, sent.numpy(), strict=True):
            rows[c].row = r


def detection(
    arrived: Iterable[int], malicious: Iterable[int], rejected: Iterable[int]
) -> dict[str, int]:
    """Confusion counts of one round over the updates that reached the server: a rejected
    malicious update is a true positive, a rejected benign one a false positive."""
    a, m, r = set(arrived), set(malicious), set(rejected)
    m &= a
    r &= a
    return {"tp": len(r & m), "fp": len(r - m), "fn": len(m - r), "tn": len(a - m - r)}
