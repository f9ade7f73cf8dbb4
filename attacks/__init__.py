"""Byzantine attacks, one module each, registered by name.

``ATTACKS`` (:data:`attacks.base.ATTACKS`) maps each name the config accepts to its class;
``none`` maps to None (no attack). Every module of this package is imported when the package
is; an attack is added by dropping one file here whose class is decorated with
``@ATTACKS.register``, and nothing else changes. Model attacks (:class:`attacks.base.ModelAttack`)
rewrite the malicious clients' ``[f, P]`` updates after training; :func:`make_attack` builds one
from its name and parameters.
"""

from __future__ import annotations

from typing import Any

from attacks.base import (
    ATTACKS,
    Attack,
    AttackContext,
    DataAttack,
    ModelAttack,
    pick_malicious,
    redraw_malicious,
)
from simulator.registry import check_params


def make_attack(name: str, **params: Any) -> Attack | None:
    """The attack registered as ``name`` built with ``params``; None for ``"none"``.

    Raises ``ValueError`` listing the valid names (unknown ``name``) or the valid parameters
    (unknown or bad parameter).
    """
    cls = ATTACKS.get(name)  # unknown name: "unknown attack 'x'; valid: [...]"
    if cls is None:
        check_params(f"attack {name!r}", params, [])
        return None
    return cls(**params)


ATTACKS.discover(__name__)

__all__ = [
    "ATTACKS",
    "Attack",
    "AttackContext",
    "DataAttack",
    "ModelAttack",
    "make_attack",
    "pick_malicious",
    "redraw_malicious",
]
