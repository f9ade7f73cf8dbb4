"""The arms of ``benchmarks/algorithm_throughput.py``: ``NAME[:K=V,...][@KEY=VALUE,...]`` (an
algorithm, its parameters, and changes to its model), the default set, and the config of one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from simulator.algorithms import ALGORITHMS
from simulator.config.sections import Config, validate

#: algorithms that need another model than the task's, and the arms that time them on it
#: (the second, FedAvg on the same model, is the first's reference)
OWN_MODEL = {"fedbn": ["fedbn@norm=batch", "fedavg@norm=batch"]}
#: model keys an arm may change after ``@``
MODEL_KEYS = ("hidden", "norm")


def default_arms() -> list[str]:
    """Every registered algorithm but FedAvg (always timed); MOON also on its own model, and an
    algorithm of :data:`OWN_MODEL` only on its model, beside FedAvg on the same model."""
    out: list[str] = []
    for a in sorted(ALGORITHMS):
        if a != "fedavg":
            out += OWN_MODEL.get(a, [a])
    return out + (["moon:mu=0"] if "moon" in ALGORITHMS else [])


Arm = tuple[str, dict[str, str], dict[str, str]]


def _pairs(text: str, part: str, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for kv in filter(None, part.split(",")):
        k, eq, v = kv.partition("=")
        if not eq or not k:
            raise ValueError(f"algorithm {text!r}: {what} {kv!r} is not KEY=VALUE")
        out[k] = v
    return out


def parse_arm(text: str) -> Arm:
    """``NAME[:K=V,...][@KEY=VALUE,...]`` -> (name, algorithm params as strings, the algorithm
    coerces them; model changes, KEY in :data:`MODEL_KEYS`).

    Raises
    ------
    ValueError
        On an unknown algorithm, a parameter without ``=`` or an unknown model key.
    """
    head, _, model_part = text.partition("@")
    name, _, rest = head.partition(":")
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; valid: {sorted(ALGORITHMS)}")
    model = _pairs(text, model_part, "model key")
    bad = sorted(set(model) - set(MODEL_KEYS))
    if bad:
        raise ValueError(f"arm {text!r}: unknown model key {bad[0]!r}; valid: {list(MODEL_KEYS)}")
    if "hidden" in model and not model["hidden"].isdigit():
        raise ValueError(
            f"arm {text!r}: hidden must be a positive integer, got {model['hidden']!r}"
        )
    return name, _pairs(text, rest, "parameter"), model


def arm_config(
    base: Config, name: str, params: dict[str, Any], model: dict[str, str] | None = None
) -> Config:
    """``base`` with another algorithm and, if given, model fields (validated: unknown
    parameters list the valid ones, a bad model value names it)."""
    alg = dataclasses.replace(base.algorithm, algorithm=name, algorithm_params=dict(params))
    out = dataclasses.replace(base, algorithm=alg)
    if model:
        fields = {k: int(v) if k == "hidden" else v for k, v in model.items()}
        out = dataclasses.replace(out, model=dataclasses.replace(base.model, **fields))
    validate(out)  # the algorithm's parameters, before the first timing
    return out
