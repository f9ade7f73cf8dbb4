"""Model groups: clients with different model architectures (``--model-groups``).

A group is written ``NAME[:KEY=VALUE[,KEY=VALUE]]``, e.g. ``mlp:hidden=32`` or
``cnn:hidden=64,norm=batch``: a model of :data:`MODEL_NAMES` and, optionally, its ``hidden``
width and ``norm``; a key not given takes the run's ``--hidden`` / ``--norm``. Client ``k``
belongs to group ``k mod G`` (:func:`simulator.training.groups.group_of`). Parsing is pure
Python so the configuration validates it without building a model.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.config.fields import ConfigError

#: the architectures a group may name (those of :mod:`simulator.training.models`)
MODEL_NAMES = ("logreg", "mlp", "mlp1", "cnn")
#: the normalizations a group may name
NORMS = ("none", "batch")
#: the keys a group may set
GROUP_KEYS = ("hidden", "norm")


@dataclass(frozen=True)
class GroupSpec:
    """One group's architecture: model name, hidden width and normalization."""

    model: str
    hidden: int
    norm: str


def parse_group(text: str, index: int, hidden: int, norm: str) -> GroupSpec:
    """Group ``index``'s spec from ``text``; ``hidden`` and ``norm`` are the defaults.

    Raises
    ------
    ConfigError
        One line naming ``model.model_groups``, the group and the valid models or keys.
    """
    where = f"model.model_groups: group {index} {text!r}"
    name, _, rest = str(text).partition(":")
    if name not in MODEL_NAMES:
        raise ConfigError(f"{where}: unknown model {name!r}; valid: {list(MODEL_NAMES)}")
    values: dict[str, str] = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if key not in GROUP_KEYS or not eq:
            raise ConfigError(
                f"{where}: unknown key {item!r}; valid: KEY=VALUE with KEY in {list(GROUP_KEYS)}"
            )
        values[key] = value
    if "hidden" in values:
        text_h = values["hidden"]
        if not text_h.isdigit() or int(text_h) < 1:
            raise ConfigError(f"{where}: hidden must be an integer >= 1, got {text_h!r}")
        hidden = int(text_h)
    norm = values.get("norm", norm)
    if norm not in NORMS:
        raise ConfigError(f"{where}: unknown norm {norm!r}; valid: {list(NORMS)}")
    return GroupSpec(name, hidden, norm)


def parse_groups(texts: tuple[str, ...], hidden: int, norm: str) -> tuple[GroupSpec, ...]:
    """Every group's spec (see :func:`parse_group`); empty when ``texts`` is."""
    return tuple(parse_group(t, i, hidden, norm) for i, t in enumerate(texts))
