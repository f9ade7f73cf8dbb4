"""An algorithm's parameters: their declaration (:class:`Param`), the usual checks and their
validation (:func:`coerce`, one-line errors naming the key and the rule)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from simulator.config.fields import ConfigError


@dataclass(frozen=True)
class Param:
    """One algorithm parameter: default, a check and its meaning (shown in errors and --help)."""

    default: Any
    help: str
    check: Callable[[Any], bool] = field(default=lambda v: True)
    rule: str = "any"
    kind: type = float


def positive(help: str, default: float) -> Param:
    """A float parameter > 0."""
    return Param(default, help, lambda v: v > 0, "> 0")


def non_negative(help: str, default: float) -> Param:
    """A float parameter >= 0."""
    return Param(default, help, lambda v: v >= 0, ">= 0")


def coerce(name: str, key: str, p: Param, value: Any) -> Any:
    """``value`` of algorithm ``name``'s parameter ``key`` as ``p`` declares it (YAML and CLI
    strings converted), or ConfigError naming the key, the value and the rule."""
    if isinstance(value, str) and p.kind in (float, int):  # YAML reads "1e-3" as a string
        try:
            value = p.kind(value)
        except ValueError:
            pass
    if p.kind is bool and isinstance(value, str) and value.lower() in ("true", "false"):
        value = value.lower() == "true"
    if p.kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    ok = isinstance(value, p.kind) and not (p.kind is not bool and isinstance(value, bool))
    if ok and p.kind is float:
        ok = math.isfinite(value)
    if not ok or not p.check(value):
        raise ConfigError(
            f"algorithm.algorithm_params: {name} {key}={value!r} invalid; "
            f"must be {p.kind.__name__} {p.rule}"
        )
    return value
