"""The population's argument checks: finite numbers in range, seeds, and the device fields'
ranges (shared by :mod:`~simulator.population.devices`, :mod:`~simulator.population.traces`
and :mod:`~simulator.population.availability`)."""

from __future__ import annotations

import math
from numbers import Integral, Real


def problem(field: str, value: float) -> str | None:
    """Why ``value`` is invalid for the device field ``field``, or None if it is fine.

    ``latency_ms`` and ``gflops`` must be >= 0, ``availability`` in (0, 1], every other field
    > 0; all of them finite."""
    if not math.isfinite(value):
        return "is not finite"
    if field in ("latency_ms", "gflops"):
        return "must be >= 0" if value < 0 else None
    if field == "availability":
        return None if 0.0 < value <= 1.0 else "must be in (0, 1]"
    return "must be > 0" if value <= 0 else None


def check_number(name: str, value: float, *, strict: bool = True, high: float = math.inf) -> None:
    """Require a finite real ``value`` > 0 (>= 0 unless ``strict``) and <= ``high``."""
    ok = (
        not isinstance(value, bool)
        and isinstance(value, Real)
        and math.isfinite(value)
        and (value > 0 if strict else value >= 0)
        and value <= high
    )
    if not ok:
        upper = f" and <= {high}" if high < math.inf else ""
        raise ValueError(
            f"{name} must be a finite number {'>' if strict else '>='} 0{upper}, got {value!r}"
        )


def check_seed(seed: int) -> None:
    """Require an int seed in ``[0, 2**64)``."""
    if isinstance(seed, bool) or not isinstance(seed, Integral) or not 0 <= seed < 2**64:
        raise ValueError(f"seed must be an int in [0, 2**64), got {seed!r}")
