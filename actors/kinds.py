"""Actor kinds: the descriptions of a heterogeneous Ray actor pool, and whether a cluster can
hold them.

A kind is declared as ``NAME=SPEC`` (``--actor-kinds``, repeatable) where SPEC is a string of
``KEY=VALUE`` items separated by commas, or, in YAML, a mapping of the same keys:

* ``device``: ``cpu`` (default) or ``gpu``;
* ``count``: actors of this kind (integer >= 1, default 1);
* ``threads``: torch threads of each actor, also its Ray ``num_cpus`` (integer >= 1, default 1);
* ``gpus``: GPU share of each actor (``device=gpu`` only; > 0, default 0.25; above 1 a whole
  number, as Ray requires);
* ``resource``: a Ray custom resource label; each actor requests :data:`LABEL_SHARE` of it, so
  it runs only on nodes that declare the label.

:func:`parse_actor_kinds` turns the mapping into :class:`ActorKind` objects (sorted by name);
:func:`check_schedulable` says, from the alive nodes' resources alone (``ray.nodes()``), whether
the cluster can start every actor, before any starts (an actor that cannot be placed would wait
forever). Both raise :class:`~simulator.config.fields.ConfigError` with one line naming the kind.
:func:`planned_nodes` gives each actor the node a packing puts it on, so that the pool does not
depend on Ray's one-actor-at-a-time placement, which can fragment the nodes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from actors.packing import packing
from simulator.config.fields import ConfigError

DEVICES = ("cpu", "gpu")
KEYS = ("device", "count", "threads", "gpus", "resource")
DEFAULT_GPU_SHARE = 0.25
LABEL_SHARE = 0.001  # of a node's custom resource label, per actor
_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
_EPS = 1e-9


@dataclass(frozen=True)
class ActorKind:
    """One kind of pool actor.

    Attributes
    ----------
    name : free label (event logs, the scheduler's feature).
    device : ``"cpu"`` or ``"gpu"``.
    count : actors of this kind in the pool.
    threads : torch threads per actor (= Ray ``num_cpus``).
    gpus : GPU share per actor (0 for CPU actors).
    resource : Ray custom resource label the actors must run on, or None.
    """

    name: str
    device: str = "cpu"
    count: int = 1
    threads: int = 1
    gpus: float = 0.0
    resource: str | None = None

    @property
    def torch_device(self) -> str:
        """``"cuda"`` for actors with a GPU share, else ``"cpu"``."""
        return "cuda" if self.gpus > 0 else "cpu"

    def demand(self) -> dict[str, float]:
        """Ray resources one actor of this kind holds (CPU, GPU when > 0, the label)."""
        out = {"CPU": float(self.threads)}
        if self.gpus > 0:
            out["GPU"] = float(self.gpus)
        if self.resource is not None:
            out[self.resource] = LABEL_SHARE
        return out

    def ray_options(self) -> dict[str, Any]:
        """Keyword arguments of ``ActorClass.options`` for one actor of this kind."""
        opts: dict[str, Any] = {"num_cpus": self.threads, "num_gpus": self.gpus}
        if self.resource is not None:
            opts["resources"] = {self.resource: LABEL_SHARE}
        return opts


def _split_spec(name: str, spec: Any) -> dict[str, Any]:
    """A kind's SPEC (``"k=v,k=v"``, a mapping, or empty for the defaults) as a mapping."""
    if spec is None or spec == "":
        return {}
    if isinstance(spec, Mapping):
        return {str(k): v for k, v in spec.items()}
    if not isinstance(spec, str):
        raise ConfigError(
            f"actor kind {name!r}: expected KEY=VALUE items separated by commas "
            f"or a mapping, got {spec!r}"
        )
    out: dict[str, Any] = {}
    for item in spec.split(","):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ConfigError(
                f"actor kind {name!r}: expected KEY=VALUE items separated by "
                f"commas, got {item.strip()!r}"
            )
        if key in out:
            raise ConfigError(f"actor kind {name!r}: key {key!r} given twice")
        out[key] = value.strip()
    return out


def _int(name: str, key: str, value: Any) -> int:
    ok = not isinstance(value, bool)
    try:
        number = float(value) if ok else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not (math.isfinite(number) and number.is_integer() and number >= 1):
        raise ConfigError(f"actor kind {name!r}: {key} must be an integer >= 1, got {value!r}")
    return int(number)


def _gpus(name: str, value: Any) -> float:
    try:
        number = math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        raise ConfigError(f"actor kind {name!r}: gpus must be a number > 0, got {value!r}")
    if number > 1 and not number.is_integer():
        raise ConfigError(
            f"actor kind {name!r}: gpus above 1 must be a whole number (Ray), got {value!r}"
        )
    return number


def parse_kind(name: Any, spec: Any) -> ActorKind:
    """One :class:`ActorKind` from its name and SPEC (see the module's docstring)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"actor kind name {name!r}: use letters, digits, '_', '-' or '.'")
    items = _split_spec(name, spec)
    for key in items:
        if key not in KEYS:
            raise ConfigError(f"actor kind {name!r}: unknown key {key!r}; valid: {', '.join(KEYS)}")
    device = str(items.get("device", "cpu")).strip().lower()
    if device not in DEVICES:
        raise ConfigError(
            f"actor kind {name!r}: unknown device {items['device']!r}; valid: {', '.join(DEVICES)}"
        )
    count = _int(name, "count", items.get("count", 1))
    threads = _int(name, "threads", items.get("threads", 1))
    if "gpus" in items and device != "gpu":
        raise ConfigError(f"actor kind {name!r}: gpus is only for device=gpu")
    gpus = (
        _gpus(name, items["gpus"])
        if "gpus" in items
        else (DEFAULT_GPU_SHARE if device == "gpu" else 0.0)
    )
    resource = items.get("resource")
    if resource is not None:
        resource = str(resource).strip()
        if not resource or resource in ("CPU", "GPU"):
            raise ConfigError(
                f"actor kind {name!r}: resource must be a custom Ray resource "
                f"label (not empty, CPU or GPU: use threads and gpus), got "
                f"{items['resource']!r}"
            )
    return ActorKind(name, device, count, threads, gpus, resource)


def parse_actor_kinds(mapping: Mapping[Any, Any]) -> list[ActorKind]:
    """The kinds of ``mapping`` (NAME -> SPEC), sorted by name; ConfigError on bad input."""
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"actor kinds: expected a mapping NAME -> SPEC, got {mapping!r}")
    kinds = [parse_kind(name, spec) for name, spec in mapping.items()]
    return sorted(kinds, key=lambda k: k.name)


def _amount(resource: str, value: float) -> str:
    unit = {"CPU": " CPUs", "GPU": " GPUs"}.get(resource, f" of {resource!r}")
    return f"{value:g}{unit}"


def total_demand(kinds: Sequence[ActorKind]) -> dict[str, float]:
    """Ray resources all actors of ``kinds`` hold together (each kind ``count`` times)."""
    need: dict[str, float] = {}
    for k in kinds:
        for r, v in k.demand().items():
            need[r] = need.get(r, 0.0) + k.count * v
    return need


def check_schedulable(
    kinds: Sequence[ActorKind], nodes: Sequence[Mapping[str, Any]]
) -> list[str | None]:
    """Raise ConfigError unless the alive ``nodes`` (``ray.nodes()`` entries: ``Alive``,
    ``Resources``, ``NodeID``) can hold every actor of ``kinds``; return the node each actor is
    placed on (:func:`planned_nodes`, from the same search).

    Checked in this order, per kind: its label exists on some node; each resource of one
    actor's demand fits on the largest node; some node holds the whole demand; the kind's
    count x demand fits in the cluster's totals; then all kinds together fit in the totals;
    last, that the actors can be packed onto the nodes (:func:`actors.packing.packing`; a
    search cut short by its step budget lets the pool try, with every node None).
    """
    live = [n for n in nodes if n.get("Alive", False)]
    alive = [dict(n.get("Resources", {})) for n in live]
    totals: dict[str, float] = {}
    for res in alive:
        for r, v in res.items():
            totals[r] = totals.get(r, 0.0) + float(v)
    listed = ", ".join(sorted(r for r in totals if not r.startswith("node:"))) or "nothing"
    for k in kinds:
        demand = k.demand()
        if k.resource is not None and k.resource not in totals:
            raise ConfigError(
                f"actor kind {k.name!r}: resource {k.resource!r} not in the "
                f"cluster (it has: {listed})"
            )
        for r, v in demand.items():
            largest = max((float(res.get(r, 0.0)) for res in alive), default=0.0)
            if v > largest + _EPS:
                raise ConfigError(
                    f"actor kind {k.name!r}: needs {_amount(r, v)} per actor; "
                    f"the largest node has {largest:g}"
                )
        if not any(
            all(float(res.get(r, 0.0)) + _EPS >= v for r, v in demand.items()) for res in alive
        ):
            whole = " and ".join(_amount(r, v) for r, v in demand.items())
            raise ConfigError(f"actor kind {k.name!r}: no node has {whole} together")
        for r, v in demand.items():
            if k.count * v > totals.get(r, 0.0) + _EPS:
                raise ConfigError(
                    f"actor kind {k.name!r}: {k.count} actors need "
                    f"{_amount(r, k.count * v)} in all; the cluster has "
                    f"{totals.get(r, 0.0):g}"
                )
    for r, v in total_demand(kinds).items():
        if v > totals.get(r, 0.0) + _EPS:
            parts = ", ".join(
                f"{k.name}: {k.count} x {k.demand()[r]:g}" for k in kinds if r in k.demand()
            )
            raise ConfigError(
                f"actor kinds need {_amount(r, v)} in total ({parts}); the "
                f"cluster has {totals.get(r, 0.0):g}"
            )
    found = packing([(k.demand(), k.count) for k in kinds], alive)
    if found is False:
        pool = ", ".join(
            f"{k.name}: {k.count} x " + " + ".join(_amount(r, v) for r, v in k.demand().items())
            for k in kinds
        )
        sizes = "; ".join(
            ", ".join(_amount(r, float(res.get(r, 0.0))) for r in sorted(total_demand(kinds)))
            for res in alive
        )
        raise ConfigError(
            f"actor kinds fit the cluster's totals but no node packing holds "
            f"them all ({pool}; nodes: {sizes})"
        )
    return _pins(kinds, live, found)


def planned_nodes(
    kinds: Sequence[ActorKind], nodes: Sequence[Mapping[str, Any]]
) -> list[str | None]:
    """The ``NodeID`` each actor of the pool (``kinds``' actors, kind after kind) is placed on
    by a packing of the alive ``nodes`` (:func:`actors.packing.packing`); all None when the
    search is undecided or finds none (the pool then lets Ray place the actors)."""
    live = [n for n in nodes if n.get("Alive", False)]
    found = packing(
        [(k.demand(), k.count) for k in kinds], [dict(n.get("Resources", {})) for n in live]
    )
    return _pins(kinds, live, found)


def _pins(
    kinds: Sequence[ActorKind],
    live: Sequence[Mapping[str, Any]],
    found: list[list[int]] | bool | None,
) -> list[str | None]:
    """A packing's counts per kind per alive node as one node id per actor (None each when
    there is no packing)."""
    if not isinstance(found, list):
        return [None] * sum(k.count for k in kinds)
    return [str(live[j]["NodeID"]) for row in found for j, c in enumerate(row) for _ in range(c)]
