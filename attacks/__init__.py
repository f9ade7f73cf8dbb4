"""Byzantine attacks, one module each, registered by name.

``ATTACKS`` maps each name the config accepts to its class; ``none`` maps to None (no attack).
Model attacks (:class:`attacks.base.ModelAttack`) rewrite the malicious clients' ``[f, P]``
updates after training; :func:`make_attack` builds one from its name and parameters.
"""

from __future__ import annotations

from typing import Any

from attacks.alie import ALIE
from attacks.backdoor import Backdoor
from attacks.base import (
    Attack,
    AttackContext,
    DataAttack,
    ModelAttack,
    pick_malicious,
    redraw_malicious,
)
from attacks.gaussian import Gaussian
from attacks.ipm import IPM
from attacks.labelflip import LabelFlip
from attacks.minmax import MinMax, MinSum
from attacks.model_replacement import ModelReplacement
from attacks.scale import ScaleModel
from attacks.signflip import SignFlip

ATTACKS: dict[str, object] = {
    "none": None,
    "signflip": SignFlip,
    "gaussian": Gaussian,
    "scale": ScaleModel,
    "alie": ALIE,
    "ipm": IPM,
    "minmax": MinMax,
    "minsum": MinSum,
    "labelflip": LabelFlip,
    "backdoor": Backdoor,
    "model_replacement": ModelReplacement,
}


def make_attack(name: str, **params: Any) -> Attack | None:
    """The attack registered as ``name`` built with ``params``; None for ``"none"``.

    Raises ``ValueError`` listing the valid names (unknown ``name``) or the valid parameters
    (unknown or bad parameter).
    """
    if name not in ATTACKS:
        raise ValueError(f"unknown attack {name!r}; valid: {sorted(ATTACKS)}")
    cls = ATTACKS[name]
    if cls is None:
        if params:
            raise ValueError(f"attack {name!r}: unknown parameter {sorted(params)[0]!r}; "
                             "valid: []")
        return None
    assert isinstance(cls, type) and issubclass(cls, Attack)
    return cls(**params)


__all__ = ["ATTACKS", "Attack", "AttackContext", "DataAttack", "ModelAttack", "make_attack",
           "pick_malicious", "redraw_malicious"]
