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
folder with a ``@register("name")`` frozen dataclass (``register`` is ``PLACEMENTS.register``);
no engine, trainer or pool file changes.
"""

from __future__ import annotations

from typing import Any

from simulator.placement.base import PlaceContext, Placed, Placement, Problem
from simulator.registry import Registry

__all__ = [
    "PLACEMENTS",
    "PlaceContext",
    "Placed",
    "Placement",
    "Problem",
    "make_placement",
    "placement_names",
    "placement_parameters",
    "predictor_of",
    "register",
]

PLACEMENTS: Registry[type[Placement]] = Registry("placement")
register = PLACEMENTS.register


def placement_names() -> list[str]:
    """The registered placements, sorted."""
    return PLACEMENTS.names()


def placement_parameters(name: str) -> dict[str, Any]:
    """Parameter name -> default of placement ``name``; an unknown name raises
    :class:`~simulator.registry.UnknownName` listing the valid ones."""
    return PLACEMENTS.parameters(name)


def predictor_of(name: str, params: dict[str, Any]) -> str:
    """The chunk cost model of placement ``name`` under ``params``: their ``predictor``, else
    the placement's default (``gbdt`` for an unknown name, which fails elsewhere)."""
    if "predictor" in params:
        return str(params["predictor"])
    return PLACEMENTS.get(name).default_predictor if name in PLACEMENTS else "gbdt"


def make_placement(name: str, **params: Any) -> Placement:
    """The placement registered as ``name`` with ``params`` (ValueError on an unknown name or
    parameter, listing the valid ones, or on a bad value)."""
    return PLACEMENTS.build(name, **params)


PLACEMENTS.discover(__name__, skip=("base", "runtime"))
