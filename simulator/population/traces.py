"""Device trace loader: read a population of device profiles from a CSV or JSON file.

:func:`load_trace` validates every entry like :class:`~simulator.population.devices.DeviceProfile`
and returns a :class:`~simulator.population.devices.Population`; errors are :class:`TraceError`.
Availability traces (per-device online intervals) are read by
:mod:`simulator.population.availability_trace`, which raises the same :class:`TraceError`.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

import numpy as np

from simulator.population.checks import problem
from simulator.population.devices import FIELDS, OPTIONAL_FIELDS, Population

T = TypeVar("T")


class TraceError(ValueError):
    """A device trace cannot be read; the message reads ``FILE:LINE: what is wrong``."""


def _parse_row(path: Path, line: int, index: int, row: Mapping[str, object]) -> list[float]:
    """Validate one trace entry and return its values in :data:`FIELDS` order, then the
    :data:`OPTIONAL_FIELDS` (0.0 when absent or empty)."""
    where = f"{path}:{line}:"
    raw = row.get("device_id", index)
    if str(raw).strip() != str(index):  # rejects 2.0, True, "02" as well
        raise TraceError(
            f"{where} field 'device_id' is {raw!r}, expected {index} "
            "(ids must be 0, 1, 2, ... in order)"
        )
    values = []
    for name in (*FIELDS, *OPTIONAL_FIELDS):
        raw = row.get(name)
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            if name in OPTIONAL_FIELDS:
                values.append(0.0)
                continue
            raise TraceError(f"{where} missing field '{name}'")
        try:
            if isinstance(raw, bool) or not isinstance(raw, int | float | str):
                raise TypeError
            value = float(raw)
        except (TypeError, ValueError, OverflowError):
            raise TraceError(f"{where} field '{name}' is not a number: {raw!r}") from None
        why = problem(name, value)
        if why:
            raise TraceError(f"{where} field '{name}' {why}, got {raw!r}")
        values.append(value)
    return values


def _read_csv(path: Path, text: str) -> list[list[float]]:
    rows: list[list[float]] = []
    header = None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        for cells in reader:
            if not any(c.strip() for c in cells) or cells[0].lstrip().startswith("#"):
                continue
            if header is None:
                header = [c.strip() for c in cells]
                missing = [f for f in FIELDS if f not in header]
                if missing or len(set(header)) != len(header):
                    raise TraceError(
                        f"{path}:{reader.line_num}: bad header, missing columns "
                        f"{missing} or duplicate names; need {list(FIELDS)}"
                    )
                continue
            if len(cells) != len(header):
                raise TraceError(
                    f"{path}:{reader.line_num}: expected {len(header)} fields, got {len(cells)}"
                )
            row = dict(zip(header, cells, strict=True))
            rows.append(_parse_row(path, reader.line_num, len(rows), row))
    except csv.Error as exc:
        raise TraceError(f"{path}:{reader.line_num}: malformed CSV: {exc}") from None
    return rows


def _read_json(path: Path, text: str) -> list[list[float]]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    entries = doc.get("devices") if isinstance(doc, dict) else doc
    if not isinstance(entries, list):
        raise TraceError(f'{path}:1: expected a list of devices or {{"devices": [...]}}')
    rows = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise TraceError(f"{path}:{i + 1}: entry is not an object")
        rows.append(_parse_row(path, i + 1, i, entry))
    return rows


def open_trace(path: Path, readers: dict[str, T], what: str) -> tuple[T, str]:
    """The reader for ``path``'s extension (``.csv`` / ``.json``) and the file's text;
    :class:`TraceError` naming the file when it is missing, unreadable or of another kind."""
    reader = readers.get(path.suffix.lower())
    if not path.exists():
        raise TraceError(f"{path}: no such {what} file")
    if reader is None:
        raise TraceError(f"{path}: unsupported trace format {path.suffix!r}; use .csv or .json")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: cannot read trace: {exc}") from None
    return reader, text


def load_trace(path: str | Path) -> Population:
    """Load device profiles from a CSV or JSON trace (format chosen by extension).

    CSV: a header row naming the :data:`FIELDS` columns in any order, plus an
    optional ``device_id`` column and an optional ``gflops`` column (sustained training
    GFLOP/s, >= 0; 0 or empty = not declared); extra columns are ignored, blank lines and lines
    starting with ``#`` are skipped.  LINE in errors is the physical line in the file.
    JSON: a list of objects with those fields (``gflops`` optional), or
    ``{"devices": [...]}``.  LINE in
    errors is the 1-based position of the entry in the device list (for a syntax
    error, the line reported by the JSON parser).  If ``device_id`` is given it must
    be 0, 1, 2, ... in order.  Values must obey the :class:`DeviceProfile` ranges.

    Raises
    ------
    TraceError
        Missing or unreadable file, unknown extension, bad header or bad row.
    """
    path = Path(path)
    read_rows, text = open_trace(path, {".csv": _read_csv, ".json": _read_json}, "trace")
    rows = read_rows(path, text)
    if not rows:
        raise TraceError(f"{path}: trace contains no devices")
    cols = np.array(rows, dtype=np.float64).T
    gflops = cols[len(FIELDS)]
    return Population(*cols[: len(FIELDS)], gflops=gflops if gflops.any() else None)
