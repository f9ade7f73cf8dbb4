"""Field machinery of the configuration sections: declaring, validating and coercing fields.

:func:`field_of` declares a field with its help text (and valid choices) in ``metadata``;
:func:`check_choice` and :func:`check_positive` validate values in ``__post_init__``;
:func:`type_name` and :func:`coerce` turn YAML or command-line values into a field's type;
:func:`parse_size` reads sizes such as ``"64MB"``. Errors are :class:`ConfigError`.

This module imports nothing of the project: every part of it (the plugin packages included) may
import :class:`ConfigError` from here.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Collection
from dataclasses import field, fields
from typing import Any


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the field and the valid choices."""


def field_of(
    default: Any, help: str, choices: Collection[str] | None = None, metavar: str | None = None
) -> Any:
    """A dataclass field with its help text and, optionally, its valid values (a tuple, or a
    plugin registry: checked against the names registered when the config is built) and the
    word its flag's value is shown as in ``--help`` (by default one taken from its name)."""
    meta = {"help": help, "choices": choices, "metavar": metavar}
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata=meta)
    return field(default=default, metadata=meta)


def check_choice(section: str, obj: Any) -> None:
    """ConfigError naming the first field of ``obj`` whose value is not one of its choices."""
    for f in fields(obj):
        ch = f.metadata.get("choices")
        val = getattr(obj, f.name)
        if ch is not None and val not in ch:
            raise ConfigError(f"{section}.{f.name}: unknown value {val!r}; valid: {list(ch)}")


def check_positive(section: str, obj: Any, names: tuple[str, ...], strict: bool = True) -> None:
    """ConfigError naming the first of ``names`` that is not finite and > 0 (>= 0 if not
    ``strict``); None values pass."""
    for n in names:
        v = getattr(obj, n)
        if v is None:
            continue
        if not math.isfinite(v):
            raise ConfigError(f"{section}.{n}: must be a finite number, got {v!r}")
        if (strict and v <= 0) or (not strict and v < 0):
            rel = "> 0" if strict else ">= 0"
            raise ConfigError(f"{section}.{n}: must be {rel}, got {v!r}")


#: the units :func:`parse_size` reads, in bytes
SIZE_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}


def parse_size(text: str | int | float) -> int:
    """Bytes of a size such as ``"64MB"``, ``"1.5GB"``, ``"512KiB"`` or a plain number of bytes
    (decimal units are powers of 1000, ``KiB/MiB/GiB`` powers of 1024).

    Raises
    ------
    ValueError
        Anything else; the message names the value and the accepted forms.
    """
    if isinstance(text, int | float) and not isinstance(text, bool):
        value, unit = float(text), ""
    else:
        s = str(text).strip().upper().replace(" ", "")
        num = s.rstrip("KMGTIB")
        try:
            value = float(num) if num else float("nan")
        except ValueError:
            value = float("nan")
        unit = s[len(num) :]
    if unit not in SIZE_UNITS or not math.isfinite(value) or value < 0:
        raise ValueError(
            f"{text!r} is not a size; give a number of bytes with an optional unit "
            "B, KB, MB, GB, TB, KiB, MiB, GiB or TiB, e.g. 64MB, 2GB, 512KiB"
        )
    return int(value * SIZE_UNITS[unit])


def type_name(typ: Any) -> str:
    """'int', 'float', 'str', 'bool', 'dict', optionally followed by ' | None'."""
    args = [a for a in typing.get_args(typ) if a is not type(None)]
    base = args[0] if args and typing.get_origin(typ) in (types.UnionType, typing.Union) else typ
    name = getattr(typing.get_origin(base) or base, "__name__", str(base))
    return name + (" | None" if type(None) in typing.get_args(typ) else "")


def coerce(sec: str, name: str, typ: Any, value: Any) -> Any:
    """``value`` (from YAML or a flag) as field ``sec.name`` of type ``typ``; ConfigError naming
    the field, the expected type and the value otherwise."""
    t = type_name(typ)
    try:
        if value is None:
            if "None" in t:
                return None
            raise ConfigError(f"{sec}.{name}: must not be empty")
        if t.startswith("dict"):
            if not isinstance(value, dict):
                raise ConfigError(f"{sec}.{name}: expected a mapping, got {value!r}")
            return dict(value)
        if t.startswith("tuple"):  # a list of strings: YAML list, repeated words of a flag
            items = value.split() if isinstance(value, str) else value
            if not isinstance(items, list | tuple):
                raise ConfigError(f"{sec}.{name}: expected a list, got {value!r}")
            return tuple(str(v) for v in items)
        if t.startswith("bool"):
            if isinstance(value, str):
                low = value.lower()
                if low not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(value)
                return low in ("true", "1", "yes")
            if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
                return bool(value)
            raise ValueError(value)  # 2 or 0.5 is not a yes or a no
        if isinstance(value, bool):  # YAML's true / yes / no is not a number or a name
            raise ValueError(value)
        if t.startswith("int"):
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return int(value)
        if t.startswith("float"):
            return float(value)
        return str(value)
    except ConfigError:
        raise
    except (TypeError, ValueError):
        kind = t.split(" ")[0].split("|")[0]
        raise ConfigError(f"{sec}.{name}: expected {kind}, got {value!r}") from None
