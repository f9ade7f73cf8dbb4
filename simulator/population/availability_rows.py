"""The last step of reading an availability trace: validate the parsed rows (the first bad one
names its line) and build the :class:`~simulator.population.online_intervals.IntervalTrace`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from simulator.population.online_intervals import IntervalTrace, build, first_problem
from simulator.population.traces import TraceError


def finish_rows(
    path: Path,
    rows: tuple[np.ndarray, np.ndarray, np.ndarray],
    period: float,
    line_of: Callable[[int], int],
    pending: tuple[int, str] | None,
    traced: np.ndarray | None = None,
) -> IntervalTrace:
    """Validate parsed rows; the first bad one wins over a parse error (``pending``: line,
    message) found after them."""
    dev, st, en = rows
    found = first_problem(dev, st, en, period, lambda r: f"line {line_of(r)}")
    if found:
        raise TraceError(f"{path}:{line_of(found[0])}: {found[1]}")
    if pending:
        raise TraceError(f"{path}:{pending[0]}: {pending[1]}")
    if not len(dev):
        raise TraceError(f"{path}:{line_of(-1)}: empty trace: no online intervals")
    return build(dev, st, en, period, traced)
