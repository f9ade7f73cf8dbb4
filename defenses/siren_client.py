"""Siren's client side (Guo et al., "Siren: Byzantine-robust Federated Learning via Proactive
Alarming", SoCC 2021).

Each client keeps a holdout of its data (10% by default) out of training. From round 1 on, a
selected client compares its previous local model with the new global model on that holdout and
raises an alarm when ``acc_local > acc_global + C_c * acc_local`` (``C_c = 0.04``): the global
model got worse on data the client knows, a sign of poisoning. An alarming client trains from its
own previous local model instead of the global one. Malicious clients always alarm (the paper's
threat model: raising alarms costs them nothing and sows doubt). The server side is
``defenses/siren.py``; the alarms reach it as the batch signal ``"alarm"``.

The state (holdouts, previous local models) is an explicit object, checkpointed with the run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch


class SirenClient:
    """Holdout split, alarm rule and start models of Siren's clients.

    Parameters
    ----------
    cc : float
        The client-side margin C_c in (0, 1).
    holdout : float
        Fraction of each client's samples held out for the alarm test, in (0, 1).
    """

    def __init__(self, cc: float = 0.04, holdout: float = 0.1) -> None:
        if not 0.0 < cc < 1.0:
            raise ValueError(f"siren client: cc {cc!r} invalid; valid: 0 < cc < 1")
        if not 0.0 < holdout < 1.0:
            raise ValueError(f"siren client: holdout {holdout!r} invalid; valid: 0 < holdout < 1")
        self.cc, self.holdout_fraction = cc, holdout
        self.holdout: list[np.ndarray] = []
        self.previous: dict[int, np.ndarray] = {}  # client -> its last local model (full vector)

    def split(self, client_index: list[np.ndarray], seed: int) -> list[np.ndarray]:
        """Keep ``holdout`` of each client's rows aside; returns the rows left for training.

        A client with two or more rows holds out at least one and keeps at least one for
        training; a client with a single row holds out nothing (it can never alarm).
        """
        rng = np.random.default_rng([seed, 0x51E4])
        train, self.holdout = [], []
        for rows in client_index:
            rows = np.asarray(rows, dtype=np.int64)
            n = len(rows)
            k = min(max(1, int(round(self.holdout_fraction * n))), n - 1) if n >= 2 else 0
            perm = rng.permutation(len(rows))
            self.holdout.append(np.sort(rows[perm[:k]]))
            train.append(np.sort(rows[perm[k:]]))
        return train

    def alarms(self, selected: np.ndarray, malicious: set[int], global_flat: torch.Tensor,
               accuracy: Callable[[torch.Tensor, np.ndarray], float]) -> dict[int, bool]:
        """Which selected clients raise an alarm this round.

        ``accuracy(model_flat, rows)`` evaluates a model on training-set rows (a client's
        holdout). A client without a previous local model (first participation) cannot compare
        and does not alarm, unless it is malicious.
        """
        out: dict[int, bool] = {}
        for c in (int(c) for c in selected):
            if c in malicious:
                out[c] = True
                continue
            prev = self.previous.get(c)
            rows = self.holdout[c] if c < len(self.holdout) else np.zeros(0, np.int64)
            if prev is None or len(rows) == 0:
                out[c] = False
                continue
            acc_local = accuracy(torch.from_numpy(prev), rows)
            acc_global = accuracy(global_flat, rows)
            out[c] = bool(acc_local > acc_global + self.cc * acc_local)
        return out

    def start_models(self, alarms: dict[int, bool], malicious: set[int]
                     ) -> dict[int, np.ndarray]:
        """Benign alarming clients train from their previous local model."""
        return {c: self.previous[c] for c, a in alarms.items()
                if a and c not in malicious and c in self.previous}

    def remember(self, client: int, local_model: np.ndarray) -> None:
        self.previous[int(client)] = np.asarray(local_model, dtype=np.float32)

    def state_dict(self) -> dict[str, Any]:
        return {"previous": dict(self.previous)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.previous = dict(state.get("previous", {}))


#: defenses whose method has a client side, and the class that implements it
CLIENT_SIDE: dict[str, type[SirenClient]] = {"siren": SirenClient}
