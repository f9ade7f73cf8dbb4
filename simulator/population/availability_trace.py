"""Availability trace files: each traced device's online intervals, read into CSR arrays
(:class:`~simulator.population.online_intervals.IntervalTrace`).

The file formats are described in :mod:`simulator.population.availability`.
:func:`load_availability_trace`
parses a file vectorized (pandas for CSV, so 10^6 rows take well under a second) and only when
something is wrong goes back over the file to find the first bad row's line.  Errors are
:class:`~simulator.population.traces.TraceError` with a one-line ``FILE:LINE: what is wrong``
message. The JSON reader is :mod:`simulator.population.availability_json`; both readers end in
:func:`simulator.population.availability_rows.finish_rows`.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np

from simulator.population.availability_json import read_json
from simulator.population.availability_rows import finish_rows
from simulator.population.online_intervals import IntervalTrace, period_of
from simulator.population.traces import TraceError, open_trace

COLUMNS = ("device_id", "start_s", "end_s")


# ------------------------------------------------------------------------------ reading files


def load_availability_trace(path: str | Path, period_s: float = 0.0) -> IntervalTrace:
    """Read a CSV or JSON availability trace (format by extension; see
    :mod:`simulator.population.availability`).

    Parameters
    ----------
    path : str or Path
        A ``.csv`` or ``.json`` file.
    period_s : float
        The period when the file does not give one (JSON ``period_s``); 0 = the largest
        ``end_s`` in the file.

    Returns
    -------
    IntervalTrace
        The traced devices' merged intervals in CSR form.

    Raises
    ------
    ValueError
        ``period_s`` is negative or not finite.
    TraceError
        ``FILE:LINE: what is wrong`` for the first bad row; ``FILE: ...`` for a missing or
        unreadable file.
    """
    if (
        isinstance(period_s, bool)
        or not isinstance(period_s, int | float)
        or not math.isfinite(period_s)
        or period_s < 0
    ):
        raise ValueError(f"period_s must be a finite number >= 0, got {period_s!r}")
    path = Path(path)
    reader, text = open_trace(path, {".csv": _read_csv, ".json": read_json}, "availability trace")
    return reader(path, text, period_s)


def _number(name: str, tok: str) -> float | str:
    """The value of a CSV cell, or what is wrong with it."""
    t = tok.strip()
    if not t:
        return f"missing value for {name}"
    try:
        if "_" in t:
            raise ValueError
        v = float(t)
    except ValueError:
        return f"{name} is not a number: {t!r}"
    return v if math.isfinite(v) else f"{name} is not finite: {t!r}"


def _device_id(tok: str) -> int | str:
    """A CSV device id (a whole number: ``7``, ``7.0`` and ``7e0`` alike, as pandas reads
    them), or what is wrong with it."""
    t = tok.strip()
    if not t:
        return "missing value for device_id"
    bad = f"device_id is not an int >= 0: {t!r}"
    try:
        v = int(t) if "_" not in t else -1
    except ValueError:
        f = _number("device_id", t)
        if isinstance(f, str) or not f.is_integer():
            return bad
        v = int(f)
    return v if 0 <= v < 2**63 else bad


def _read_csv(path: Path, text: str, period_s: float) -> IntervalTrace:
    lines = text.split("\n")
    head = next(
        (i for i, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith("#")), None
    )
    if head is None:
        raise TraceError(f"{path}:1: empty trace: no header {','.join(COLUMNS)}")
    cols = [c.strip() for c in lines[head].split(",")]
    for c in cols:
        if c not in COLUMNS or cols.count(c) > 1:
            why = "duplicate" if c in COLUMNS else "unexpected"
            raise TraceError(
                f"{path}:{head + 1}: {why} column {c!r}; the header must name {','.join(COLUMNS)}"
            )
    for c in COLUMNS:
        if c not in cols:
            raise TraceError(f"{path}:{head + 1}: missing column {c!r}")
    where = [cols.index(c) for c in COLUMNS]
    body = "\n".join(lines[head + 1 :])
    fast = _fast_csv(body, where)
    if fast is not None:

        def line_of(r: int) -> int:  # pandas skips blank lines; there are no comments
            data = [i for i, ln in enumerate(lines[head + 1 :], head + 2) if ln.strip()]
            return data[r] if data else head + 1

        return finish_rows(
            path, fast, period_of(period_s, fast[2]) if len(fast[2]) else 1.0, line_of, None
        )
    dev: list[int] = []
    st: list[float] = []
    en: list[float] = []
    nums: list[int] = []
    pending = None
    for no, ln in enumerate(lines[head + 1 :], head + 2):
        if not ln.strip() or ln.lstrip().startswith("#"):
            continue
        cells = ln.split(",")
        if len(cells) != len(cols):
            pending = (no, f"expected {len(cols)} fields ({','.join(cols)}), got {len(cells)}")
            break
        got = [
            _device_id(cells[where[0]]),
            _number("start_s", cells[where[1]]),
            _number("end_s", cells[where[2]]),
        ]
        why = next((g for g in got if isinstance(g, str)), None)
        if why:
            pending = (no, why)
            break
        dev.append(got[0])  # type: ignore[arg-type]
        st.append(got[1])  # type: ignore[arg-type]
        en.append(got[2])  # type: ignore[arg-type]
        nums.append(no)
    rows = (np.array(dev, np.int64), np.array(st, np.float64), np.array(en, np.float64))
    period = period_of(period_s, rows[2]) if len(rows[2]) else 1.0
    return finish_rows(path, rows, period, lambda r: nums[r] if nums else head + 1, pending)


def _fast_csv(body: str, where: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The rows parsed by pandas, or None when anything looks off (the caller then goes line
    by line and names the first bad one)."""
    if "#" in body or "_" in body or '"' in body:
        return None
    import pandas as pd

    try:
        df = pd.read_csv(
            io.StringIO(body),
            header=None,
            engine="c",
            dtype={where[0]: np.int64, where[1]: np.float64, where[2]: np.float64},
        )
    except (ValueError, OverflowError, TypeError):  # pandas' parser errors are ValueErrors
        return None
    if df.shape[1] != len(where):
        return None
    dev, st, en = (df[i].to_numpy() for i in where)
    if dev.dtype != np.int64 or not (np.isfinite(st).all() and np.isfinite(en).all()):
        return None
    return dev, st.astype(np.float64), en.astype(np.float64)
