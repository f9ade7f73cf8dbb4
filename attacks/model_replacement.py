"""Model replacement: the malicious client boosts its update so that averaging replaces the global
model with its (backdoored) local model.

References
----------
Bagdasaryan, Veit, Hua, Estrin & Shmatikov, "How To Backdoor Federated Learning", AISTATS 2020,
Section 4 ("constrain-and-scale"): the attacker submits ``X~ = gamma * (X - G) + G`` with
``gamma = n / eta`` (``n`` participants, server learning rate ``eta``), so that after the
server's average ``G + eta / n * sum_i (L_i - G)`` the global model is (approximately, once
benign updates have nearly converged and cancel) replaced by the attacker's model ``X``.

Here the update is ``delta = X - G``, so the attack sends ``boost * delta``; ``boost=None``
means ``gamma = n / eta`` with ``n = ctx.num_total`` (the round's arriving rows) and ``eta = 1``.
The boost is per malicious row: with ``f > 1`` attackers that all replace, pass
``boost = n / f`` to split the boost among them, as the paper suggests.

Backdoor training
-----------------
The engine runs one attack per run, so the backdoor's training travels with this attack: when
any of the backdoor parameters (``target``, ``poison_fraction``, ``pattern``,
``trigger_value``) is given, :attr:`ModelReplacement.data` is a :class:`attacks.backdoor.Backdoor`
built from them, and with ``--attack model_replacement`` the malicious clients train on
backdoored data (the engine poisons the malicious clients' batches with ``attack.data`` for a
model attack that has a non-None ``data`` attribute), then boost the resulting update. With no
backdoor parameter ``data`` is None and the attack boosts whatever the malicious clients trained.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from attacks.backdoor import Backdoor
from attacks.base import ATTACKS, AttackContext, ModelAttack

#: parameters passed through to the backdoor's data poisoning (None: not given)
BACKDOOR_PARAMS = ("target", "poison_fraction", "pattern", "trigger_value")


@ATTACKS.register
class ModelReplacement(ModelAttack):
    """Send ``boost * delta`` in place of the honest update ``delta``.

    Parameters
    ----------
    boost : float or None, default None
        The boost factor ``gamma``; None means ``n = ctx.num_total`` (server lr 1).
    target, poison_fraction, pattern, trigger_value : optional
        Backdoor parameters (see :class:`attacks.backdoor.Backdoor`); when any is given,
        :attr:`data` is the backdoor the malicious clients train with.

    Attributes
    ----------
    data : Backdoor or None
        The data poisoning of the malicious clients' training, or None.
    """

    name: ClassVar[str] = "model_replacement"
    defaults: ClassVar[dict[str, Any]] = {"boost": None, **{k: None for k in BACKDOOR_PARAMS}}

    def check(self) -> None:
        self.number("boost", positive=True, allow_none=True)
        given = {k: self.params[k] for k in BACKDOOR_PARAMS if self.params[k] is not None}
        try:
            self.data: Backdoor | None = Backdoor(**given) if given else None
        except ValueError as e:
            raise ValueError(str(e).replace("attack 'backdoor'", f"attack {self.name!r}")) from None
        if self.data is not None:  # record the backdoor's validated values
            self.params.update({k: self.data.params[k] for k in given})

    def boost_for(self, ctx: AttackContext) -> float:
        """The boost factor this round: ``boost``, or ``ctx.num_total`` when None."""
        boost = self.params["boost"]
        return float(ctx.num_total) if boost is None else float(boost)

    def attack(self, malicious: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        return self.boost_for(ctx) * malicious.to(torch.float64)
