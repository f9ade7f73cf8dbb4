"""Placements of a round's training tasks on the pool's actors, one file each, registered by
name (``--placement``, parameters ``--placement-param KEY=VALUE``).

=================  ==================================================================
``greedy``         the original default: longest task (samples x epochs) first onto the
                   least loaded actor; one chunk per actor
``round_robin``    task j to actor j mod n; one chunk per actor
``lpt``            the default: longest processing time first on the predicted costs (ETC),
                   by the fixed prior unless ``predictor=`` says otherwise (deterministic)
``minmin``         Min-Min on the predicted costs (Braun et al., JPDC 2001)
``sufferage``      Sufferage on the predicted costs (Maheswaran et al., 1999)
``ga``             genetic search whose fitness is the predicted sort-and-chunk makespan,
                   seeded with the four above and greedy
=================  ==================================================================

The cost-based placements (all but the first two) sort and cut each actor's tasks into stacked
chunks (:mod:`simulator.scheduler.chunking`) unless ``chunking=false``; every placement's
schedule gets a predicted makespan, logged beside the measured one
(:class:`simulator.placement.runtime.Scheduler`). The chunk cost model is ``predictor=`` or the
placement's :attr:`~simulator.placement.base.Placement.default_predictor` (:func:`predictor_of`):
the learned ``gbdt`` for all but ``lpt``, whose fixed ``prior`` keeps runs bitwise
reproducible. Adding a placement is one new file in this
folder with a ``@register("name")`` frozen dataclass; no engine, trainer or pool file changes.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from typing import Any, TypeVar

from simulator.placement.base import PlaceContext, Placed, Placement, Problem

__all__ = ["PLACEMENTS", "PlaceContext", "Placed", "Placement", "Problem", "make_placement",
           "placement_names", "placement_parameters", "predictor_of", "register"]

PLACEMENTS: dict[str, type[Placement]] = {}
P = TypeVar("P", bound=type[Placement])


def register(name: str):  # noqa: ANN201 (decorator)
    """Class decorator: register a :class:`Placement` dataclass under ``name``."""

    def deco(cls: P) -> P:
        if name in PLACEMENTS and PLACEMENTS[name] is not cls:
            raise ValueError(f"placement {name!r} is registered twice")
        PLACEMENTS[name] = cls
        cls.name = name  # type: ignore[misc]
        return cls

    return deco


def _load_all() -> None:
    for mod in pkgutil.iter_modules(__path__):
        if mod.name not in ("base", "runtime"):
            importlib.import_module(f"{__name__}.{mod.name}")


_load_all()


def placement_names() -> list[str]:
    """The registered placements, sorted."""
    return sorted(PLACEMENTS)


def placement_parameters(name: str) -> dict[str, Any]:
    """Parameter name -> default of placement ``name``."""
    if name not in PLACEMENTS:
        raise ValueError(f"unknown placement {name!r}; valid: {placement_names()}")
    return {f.name: f.default for f in dataclasses.fields(PLACEMENTS[name])}


def predictor_of(name: str, params: dict[str, Any]) -> str:
    """The chunk cost model of placement ``name`` under ``params``: their ``predictor``, else
    the placement's default (``gbdt`` for an unknown name, which fails elsewhere)."""
    if "predictor" in params:
        return str(params["predictor"])
    cls = PLACEMENTS.get(name)
    return cls.default_predictor if cls is not None else "gbdt"


def make_placement(name: str, **params: Any) -> Placement:
    """The placement registered as ``name`` with ``params`` (ValueError on an unknown name or
    parameter, listing the valid ones, or on a bad value)."""
    valid = placement_parameters(name)
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise ValueError(f"placement {name!r}: unknown parameters {unknown}; valid "
                         f"parameters: {sorted(valid)}")
    return PLACEMENTS[name](**params)
