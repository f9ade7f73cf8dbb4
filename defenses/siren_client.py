"""Siren's client side (Guo et al., "Siren: Byzantine-robust Federated Learning via Proactive
Alarming", SoCC 2021).

Each client keeps a holdout of its data (10% by default) out of training. From round 1 on, a
selected client compares its previous local model with the new global model on that holdout and
raises an alarm when the global model got worse on data the client knows, a sign of poisoning.
An alarming client trains from its own previous local model instead of the global one.
Malicious clients always alarm (the paper's threat model: raising alarms costs them nothing and
sows doubt). The server side is ``defenses/siren.py``; the alarms reach it as the batch signal
``"alarm"``.

Two alarm tests. The paper's (``alarm="paper"``): ``acc_local > acc_global + C_c * acc_local``
with ``C_c = 0.04``. Ours (``alarm="mcnemar"``, the default): a one-sided exact McNemar test on
the paired holdout outcomes. Of the ``m`` holdout samples that exactly one of the two models
classifies correctly, ``b`` are the local model's; under "the global model is as good" ``b`` is
Binomial(m, 1/2), and the client alarms when ``P(B >= b) <= alpha``. The paper's fixed margin
is below one sample on a small holdout: with ~144 samples a client a 10% holdout has ~14, one
sample is 7 points, and two models of equal quality cross a 4-point margin often (the notes'
arithmetic: the paired difference has standard deviation ``sqrt(d / n)`` for a disagreement
share ``d``, 4.5 points at ``n = 50, d = 0.1``). The test's false-alarm rate is at most
``alpha`` whatever the holdout size; a holdout too small to reach ``alpha`` (``m < 5`` at 0.05)
never alarms.

The holdouts are the held part of the client data source's split (computed on demand for
virtual clients); the previous local models live in the run's client-state store, which
checkpoints them, and so do the strikes of both decision rules
(``defenses/siren_reputation.py``): under the population rule banned clients are refused before
they train, under the paper rule their rows carry the batch signal ``"banned"``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from defenses import siren_reputation as reputation

if TYPE_CHECKING:
    from simulator.data.clients import ClientData

#: tag of the holdout split's random stream (kept so that holdouts never change)
HOLDOUT_TAG = 0x51E4
#: the client-state table of each client's previous local model
TABLE = "siren_prev"
#: the alarm tests
ALARMS = ("mcnemar", "paper")


def mcnemar_p(b: int, c: int) -> float:
    """One-sided exact McNemar p-value: ``P(B >= b)`` for ``B ~ Binomial(b + c, 1/2)``.

    ``b``: holdout samples the local model gets right and the global one wrong; ``c``: the
    reverse. Exact: the binomial tail is summed in integers and divided once. No discordant
    pair (``b = c = 0``) gives 1.
    """
    m = b + c
    return sum(math.comb(m, k) for k in range(b, m + 1)) / 2**m


class SirenClient:
    """Holdout split, alarm test, start models, strikes and bans of Siren's clients; a round
    hook.

    Parameters
    ----------
    cc : float
        The paper alarm's margin C_c in (0, 1).
    holdout : float
        Fraction of each client's samples held out for the alarm test, in (0, 1).
    alarm : {"mcnemar", "paper"}
        The alarm test (module docstring).
    alpha : float
        Level of the McNemar test, in (0, 1).

    In a run, :meth:`attach` takes these, the decision rule and its reputation's ban threshold
    and reward from the run's :class:`~defenses.siren.SirenDefense` (the ``siren`` defense
    parameters). The previous local models (table ``siren_prev``) and the strikes (table
    ``siren_strikes``) live in the run's client-state store, the holdouts are the held part of
    the client data source's split; nothing here grows with the population.
    """

    #: the local models are remembered from the honest rows, so the round keeps them
    needs_rows = False

    def __init__(
        self, cc: float = 0.04, holdout: float = 0.1, alarm: str = "mcnemar", alpha: float = 0.05
    ) -> None:
        if not 0.0 < cc < 1.0:
            raise ValueError(f"siren client: cc {cc!r} invalid; valid: 0 < cc < 1")
        if not 0.0 < holdout < 1.0:
            raise ValueError(f"siren client: holdout {holdout!r} invalid; valid: 0 < holdout < 1")
        if alarm not in ALARMS:
            raise ValueError(f"siren client: alarm {alarm!r} invalid; valid: {list(ALARMS)}")
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"siren client: alpha {alpha!r} invalid; valid: 0 < alpha < 1")
        self.cc, self.holdout_fraction, self.test, self.alpha = cc, holdout, alarm, alpha
        self.holdout: ClientData | None = None
        #: (ban threshold, reward) of the reputation; None: not kept here (no siren defense)
        self.reputation: tuple[int, float] | None = None
        #: the server's decision rule ("paper" or "population"): how bans take effect
        self.rule = "population"

    def split(self, clients: ClientData, seed: int) -> ClientData:
        """Keep ``holdout`` of each client's rows aside; returns the source left for training.

        A client with two or more rows holds out at least one and keeps at least one for
        training; a client with a single row holds out nothing (it can never alarm).
        """
        train, self.holdout = clients.split(self.holdout_fraction, seed=seed, tag=HOLDOUT_TAG)
        return train

    def alarm(self, acc_local: float, acc_global: float) -> bool:
        """Siren's rule: alarm when ``acc_local > acc_global + C_c * acc_local``."""
        return bool(acc_local > acc_global + self.cc * acc_local)

    def alarm_paired(self, local_right: np.ndarray, global_right: np.ndarray) -> bool:
        """Our rule: alarm when the one-sided McNemar p-value of the paired holdout outcomes
        (``[n]`` bools: which samples each model classifies correctly) is ``<= alpha``."""
        lr, gr = np.asarray(local_right, bool), np.asarray(global_right, bool)
        return mcnemar_p(int((lr & ~gr).sum()), int((~lr & gr).sum())) <= self.alpha

    def alarms(
        self,
        selected: np.ndarray,
        malicious: set[int],
        previous: dict[int, np.ndarray | None],
        accuracy: Callable[[torch.Tensor | None, int], float | None],
        correct: Callable[[torch.Tensor | None, int], np.ndarray | None] | None = None,
    ) -> dict[int, bool]:
        """Which selected clients raise an alarm this round.

        ``previous[c]`` is client c's last local model (None before its first round);
        ``accuracy(model_flat, c)`` evaluates a model on c's holdout (``model_flat`` None: the
        global model) and returns None when c holds nothing out; ``correct`` does the same
        per sample (``[n]`` bools), for the McNemar test. A client without a previous model or
        holdout cannot compare and does not alarm, unless it is malicious.
        """
        if self.test == "mcnemar" and correct is None:
            raise ValueError("siren client: the McNemar alarm needs per-sample correctness")
        out: dict[int, bool] = {}
        for c in (int(c) for c in selected):
            if c in malicious:
                out[c] = True
                continue
            prev = previous.get(c)
            if prev is None:
                out[c] = False
                continue
            local = torch.from_numpy(prev)
            if self.test == "paper":
                acc_local = accuracy(local, c)
                out[c] = acc_local is not None and self.alarm(acc_local, accuracy(None, c))
                continue
            assert correct is not None
            right = correct(local, c)
            out[c] = right is not None and self.alarm_paired(right, correct(None, c))
        return out

    def start_models(
        self, alarms: dict[int, bool], malicious: set[int], previous: dict[int, np.ndarray | None]
    ) -> dict[int, np.ndarray]:
        """Benign alarming clients train from their previous local model."""
        return {
            c: previous[c]
            for c, a in alarms.items()
            if a and c not in malicious and previous.get(c) is not None
        }

    # -- round hook ----------------------------------------------------------------------------
    def attach(self, sim: Any) -> ClientData:
        """Take the parameters of the run's ``siren`` defense, split the holdouts off the
        simulation's clients and declare the store tables; returns the client data the actors
        train on."""
        d = sim.defense
        if getattr(d, "name", None) == "siren":
            self.cc, self.holdout_fraction, self.test, self.alpha = (
                d.cc,
                d.holdout,
                d.alarm,
                d.alpha,
            )
            self.reputation, self.rule = (d.ban_threshold, d.reward), d.rule
        sim.store.declare(TABLE, (sim.fed.layout.size,))
        if self.reputation is not None:
            reputation.declare(sim.store)
        return self.split(sim.fed.clients, sim.cfg.experiment.seed)

    def refuse(self, sim: Any, selected: np.ndarray) -> set[int]:
        """Population rule: the selected clients whose strikes reached the ban threshold (the
        engine refuses them when the round starts: no training, no upload, no waiting)."""
        if self.reputation is None or self.rule != "population":
            return set()
        return reputation.banned_among(sim.store, selected.tolist(), self.reputation[0])

    def on_plan(self, sim: Any, plan: Any) -> None:
        """Bans (population rule: leave out the clients :meth:`refuse` refused; paper rule: mark
        the banned clients among those selected or arriving, ``plan.banned``), then the alarms of
        the selected clients still in the round, and start models of the benign alarming ones."""
        sel = plan.selected
        if self.reputation is not None and self.rule == "population":
            refused = {v.client_id for v in plan.verdicts if v.reason == reputation.BANNED}
            sel = np.array([c for c in sel.tolist() if c not in refused], np.int64)
        elif self.reputation is not None:
            ids = [*sel.tolist(), *(a.client_id for a in plan.outcome.arrived)]
            plan.banned = reputation.banned_among(sim.store, ids, self.reputation[0])
        rows, present = sim.store.get(TABLE, sel)
        previous = {
            int(c): (r if ok else None)
            for c, r, ok in zip(sel.tolist(), rows, present.tolist(), strict=True)
        }

        def holdout(c: int) -> tuple[np.ndarray, np.ndarray]:
            ((x, y),) = sim.fed.arrays(self.holdout, np.array([c]))
            return x, y

        def accuracy(flat: torch.Tensor | None, c: int) -> float | None:
            x, y = holdout(c)
            if len(y) == 0:
                return None
            return sim.server.accuracy_on(sim.global_flat if flat is None else flat, x, y)

        def correct(flat: torch.Tensor | None, c: int) -> np.ndarray | None:
            x, y = holdout(c)
            if len(y) == 0:
                return None
            return sim.server.correct_on(sim.global_flat if flat is None else flat, x, y)

        plan.alarms = self.alarms(sel, plan.malicious, previous, accuracy, correct)
        plan.starts.update(self.start_models(plan.alarms, plan.malicious, previous))

    def on_round_end(self, sim: Any, record: Any) -> None:
        """The round's verdicts update the strikes in the store (each rule counts its own:
        :data:`~defenses.siren_reputation.NOT_JUDGED`, :data:`~defenses.siren_reputation.
        NOT_SEEN`)."""
        if self.reputation is not None:
            skip = reputation.NOT_SEEN if self.rule == "paper" else reputation.NOT_JUDGED
            reputation.update_strikes(sim.store, record.verdicts, self.reputation[1], skip)

    def on_collect(self, sim: Any, plan: Any, returned: dict[int, Any]) -> None:
        """Remember the benign clients' new local models (before any model attack)."""
        ids = np.array(sorted(c for c in returned if c not in plan.malicious), np.int64)
        if len(ids):
            # rows hold the shared entries; kept-local entries (FedBN) come from the client's
            # own store row when it trains next
            g, sp = sim.global_flat, sim.space
            gs = sp.shared_of(g).numpy()
            sim.store.put(
                TABLE,
                ids,
                np.stack(
                    [
                        sp.full_of(torch.from_numpy(gs + returned[int(c)].row), g).numpy()
                        for c in ids
                    ]
                ),
            )
