"""One way to register a plugin: a decorator in the plugin's file, and discovery of the files.

Every plugin kind (algorithms, defenses, attacks, round policies, placements, datasets,
partitions, heterogeneity cases) keeps a :class:`Registry`. A plugin is one file in the kind's
package whose object is decorated with ``@REGISTRY.register`` (its ``name`` attribute) or
``@REGISTRY.register("name")``; :meth:`Registry.discover` imports every module of the package, so
adding a plugin touches no other file. Looking up an unknown name raises :class:`UnknownName`
(a ``ValueError``) listing the valid ones; a plugin's parameters are checked by
:func:`check_params`, which every kind's error goes through (``KIND 'name': unknown parameter
'x'; valid: [...]``).

The registry itself lives in the kind's package ``__init__`` (or its ``base`` module); a plugin
file imports it back, which is the one import cycle ``tools/import_cycles.py`` allows.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Iterable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class UnknownName(ValueError):
    """A name no plugin of a kind is registered under; the message lists the valid ones."""


def check_params(
    what: str,
    given: Iterable[str],
    valid: Iterable[str],
    required: Iterable[str] = (),
    error: type[Exception] = ValueError,
) -> None:
    """Raise ``error`` in one line where ``given`` (parameter names) holds one not in
    ``valid`` or lacks one of ``required``: ``"{what}: unknown parameter 'x'; valid: [...]"``
    (the first such name, the valid ones sorted), or ``"missing parameter"``. ``what`` names
    the plugin, e.g. ``"defense 'krum'"``.

    >>> check_params("attack 'noise'", ["sigma", "scale"], ["sigma"])
    Traceback (most recent call last):
    ValueError: attack 'noise': unknown parameter 'scale'; valid: ['sigma']
    """
    names, ok = set(given), sorted(valid)
    for kind, bad in (("unknown", names - set(ok)), ("missing", set(required) - names)):
        if bad:
            raise error(f"{what}: {kind} parameter {min(bad)!r}; valid: {ok}")


class Registry(Generic[T]):
    """Name -> plugin of one kind.

    Parameters
    ----------
    kind : what the plugins are, for messages ("defense", "round policy", ...).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, obj: T | str | None = None) -> Any:
        """Decorator. ``@reg.register`` uses the object's ``name`` attribute; ``@reg.register(
        "name")`` sets it. Registering a different object under a taken name raises."""
        if isinstance(obj, str) or obj is None:
            name = obj

            def deco(target: T) -> T:
                return self._add(name, target)

            return deco
        return self._add(None, obj)

    def _add(self, name: str | None, obj: T) -> T:
        if name is None:
            name = getattr(obj, "name", None)
            if not isinstance(name, str) or not name:
                raise TypeError(
                    f"{self.kind} {obj!r}: register it with a name (no 'name' attribute)"
                )
        elif isinstance(obj, type) or hasattr(obj, "__dict__"):
            try:
                obj.name = name  # type: ignore[attr-defined]
            except (AttributeError, TypeError):
                pass
        if name in self._items and self._items[name] is not obj:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._items[name] = obj
        return obj

    def discover(self, package: str, skip: tuple[str, ...] = ("base",)) -> None:
        """Import every module of ``package`` (its plugins register themselves on import);
        modules named in ``skip`` and private ones (``_x``) are left out."""
        pkg = importlib.import_module(package)
        for mod in pkgutil.iter_modules(pkg.__path__):
            if mod.name not in skip and not mod.name.startswith("_"):
                importlib.import_module(f"{package}.{mod.name}")

    def get(self, name: str) -> T:
        """The plugin registered as ``name``; an unknown name lists the valid ones."""
        try:
            return self._items[name]
        except KeyError:
            raise UnknownName(f"unknown {self.kind} {name!r}; valid: {self.names()}") from None

    def parameters(self, name: str) -> dict[str, Any]:
        """Parameter name -> default (``dataclasses.MISSING`` when required) of plugin
        ``name``, a dataclass; an unknown name lists the valid ones."""
        return {f.name: f.default for f in dataclasses.fields(self.get(name))}  # type: ignore[arg-type]

    def build(self, name: str, **params: Any) -> T:
        """Plugin ``name`` (a dataclass) made with ``params``; an unknown name, an unknown
        parameter or a missing required one raises ``ValueError`` in one line listing the valid
        ones (:func:`check_params`)."""
        valid = self.parameters(name)
        required = [p for p, d in valid.items() if d is dataclasses.MISSING]
        check_params(f"{self.kind} {name!r}", params, valid, required)
        return self.get(name)(**params)  # type: ignore[operator]

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._items)

    def items(self) -> list[tuple[str, T]]:
        """(name, plugin) pairs, sorted by name."""
        return sorted(self._items.items())

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __delitem__(self, name: str) -> None:
        """Unregister ``name`` (a test that registered a plugin of its own removes it again)."""
        self.get(name)
        del self._items[name]
