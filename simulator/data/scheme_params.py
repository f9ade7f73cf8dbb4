"""Each partition scheme's parameters, as ``--partition-params KEY=VALUE`` sets them.

A scheme's parameters are the keyword arguments of its function in
:data:`~simulator.data.partitions.PARTITIONS` (with their defaults). The older shorthand fields of
``DataConfig`` (``dirichlet_alpha``, ``classes_per_client``, ``missing_classes``,
``virtual_size_*``) stay: they are the defaults of the parameters they name (:data:`SHORTHAND`),
and ``partition_params`` overrides them, as ``policy_params`` overrides the clock's shorthand
fields. Values are checked here for their type; their ranges are checked by the scheme when the
federation is built (before any training).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simulator.data.partitions import PARTITIONS, scheme_keywords
from simulator.registry import check_params

#: DataConfig shorthand field -> (the schemes it applies to, the parameter it sets)
SHORTHAND: dict[str, tuple[tuple[str, ...], str]] = {
    "dirichlet_alpha": (("dirichlet", "quantity", "virtual"), "alpha"),
    "classes_per_client": (("shards",), "classes_per_client"),
    "missing_classes": (("missing",), "missing_classes"),
    "virtual_size_median": (("virtual",), "size_median"),
    "virtual_size_sigma": (("virtual",), "size_sigma"),
    "virtual_size_min": (("virtual",), "size_min"),
    "virtual_size_max": (("virtual",), "size_max"),
}


def scheme_parameters(scheme: str) -> dict[str, Any]:
    """Parameter name -> default of partition ``scheme``. ``natural`` takes none in a run: its
    clients are the LEAF writers and FedProx devices as they come, one each
    (:meth:`~simulator.data.clients.NaturalData.from_groups`), so ``partition``'s ``assign`` is
    no run parameter.

    Raises
    ------
    ValueError
        On an unknown scheme (the message lists the valid ones).
    """
    if scheme not in PARTITIONS:
        raise ValueError(f"unknown partition {scheme!r}; valid: {', '.join(PARTITIONS.names())}")
    if scheme == "natural":
        return {}
    return scheme_keywords(PARTITIONS.get(scheme))


def _typed(scheme: str, key: str, value: Any, default: Any) -> Any:
    """``value`` if it has the type of ``default`` (an int where a float is expected becomes a
    float); ValueError naming the key otherwise."""
    num = isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = num and float(value).is_integer()
        value = int(value) if ok else value
    elif isinstance(default, float):
        ok, value = num, float(value) if num else value
    else:
        ok = isinstance(value, type(default))
    if not ok:
        raise ValueError(
            f"partition {scheme!r} parameter {key!r} must be "
            f"{type(default).__name__}, got {value!r}"
        )
    return value


def resolve_partition_params(
    scheme: str, shorthand: Mapping[str, Any], given: Mapping[str, Any]
) -> dict[str, Any]:
    """The parameters that ``scheme`` is called with: the shorthand fields that apply to it
    (``shorthand``: field name -> value), overridden by ``given`` (``partition_params``).

    Raises
    ------
    ValueError
        On a parameter ``scheme`` does not take (the message lists the valid ones) or a value
        of the wrong type.
    """
    valid = scheme_parameters(scheme)
    check_params(f"partition {scheme!r}", given, valid)
    out = {
        param: shorthand[name]
        for name, (schemes, param) in SHORTHAND.items()
        if scheme in schemes and name in shorthand
    }
    out.update({k: _typed(scheme, k, v, valid[k]) for k, v in given.items()})
    return out


def parameters_help() -> str:
    """Each scheme's parameters, for the field's help text and the README."""
    return "; ".join(
        f"{s}: {', '.join(scheme_parameters(s)) or 'none'}" for s in PARTITIONS.names()
    )
