"""Straggler study: metrics, records, table and files from the runs' round events.

A pure module (no simulator import): :func:`run_metrics` reduces one run's round events (one dict
per server step, as in ``events.jsonl``) to its accuracy curve, round durations, stale / wasted /
dropout shares and participation figures; :func:`study_results` turns every run of a study into
one flat record with time-to-accuracy against targets shared by all policies.
:mod:`benchmarks.straggler_study.output` (table and files) and
:mod:`benchmarks.straggler_study.plots` (PNGs) present them.

Event keys read (others are ignored; a missing list key is empty, a missing number 0):
``round``, ``round_start``, ``virtual_time`` (virtual seconds), ``accuracy`` (None when the step
was not evaluated), ``selected``, ``participants``, ``aggregated``, ``stale``, ``dropout``,
``device_seconds``, ``wasted_device_seconds``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

FRACTIONS: tuple[float, ...] = (0.8, 0.9)  # targets: these fractions of the best final accuracy
TOLERANCE = 1e-12  # absorbs the float rounding of target = fraction x best accuracy
Curve = list[tuple[int, float, float]]
#: the sums over a run's steps that :func:`run_metrics` reports, in its order
TOTALS = (
    "stale_updates",
    "aggregated_updates",
    "wasted_device_seconds",
    "device_seconds",
    "dropouts",
    "started_updates",
)


def gini(counts: Iterable[float]) -> float:
    """Gini coefficient of non-negative counts (0 = all equal, towards 1 = one holds all).

    With the counts sorted ascending, ``x_1 <= ... <= x_n``, and their cumulative sums
    ``C_i = x_1 + ... + x_i``::

        G = (n + 1 - 2 * (C_1 + ... + C_n) / C_n) / n

    which equals ``sum_ij |x_i - x_j| / (2 n^2 mean(x))``. No counts, or all zero, give 0.
    Example: ``[0, 0, 0, 4]`` -> C = 0, 0, 0, 4 -> (5 - 2 * 4 / 4) / 4 = 0.75.

    Raises
    ------
    ValueError
        If a count is negative or not a finite number.
    """
    x = np.sort(np.asarray(list(counts), dtype=float))
    if x.size and not np.all(np.isfinite(x)):
        raise ValueError("gini: counts must be finite numbers")
    if x.size and x[0] < 0:
        raise ValueError(f"gini: counts must be non-negative, got {x[0]:g}")
    if x.size == 0 or x[-1] == 0:
        return 0.0
    cum = np.cumsum(x)
    n = x.size
    return float((n + 1 - 2 * cum.sum() / cum[-1]) / n)


def _ids(e: Mapping[str, Any], key: str, i: int) -> list[int]:
    v = e.get(key, [])
    if v is None:
        return []
    if not isinstance(v, (list, tuple)):
        raise ValueError(
            f"round event {i}: {key!r} must be a list of device ids, got {type(v).__name__}"
        )
    return [int(d) for d in v]


def _number(e: Mapping[str, Any], key: str, i: int, default: float | None) -> float:
    v = e.get(key, default)
    if v is None and default is not None:
        v = default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"round event {i}: {key!r} must be a finite number, got {v!r}")
    return float(v)


def _share(num: float, den: float) -> float | None:
    return float(num / den) if den > 0 else None


def run_metrics(
    events: Sequence[Mapping[str, Any]], *, quartiles: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Reduce one run's round events (one per server step, in order) to its study metrics.

    Returns a dict with:

    * ``final_accuracy``: the last non-None ``accuracy`` (None if no step was evaluated);
      ``best_accuracy``: the largest one;
    * ``curve``: ``(round, virtual_hours, accuracy)`` of every evaluated step, with
      ``virtual_hours = virtual_time / 3600``;
    * ``round_durations_s``: array of ``virtual_time - round_start`` per step (a step without
      ``round_start``, from an old run, starts where the previous step ended, 0 for the first);
    * ``rounds``: number of server steps; ``virtual_hours``: last ``virtual_time / 3600``;
    * ``stale_share = sum len(stale) / sum aggregated``;
      ``wasted_compute_share = sum wasted_device_seconds / sum device_seconds``;
      ``dropout_share = sum len(dropout) / sum len(selected)`` (each None when its
      denominator is 0), and those sums as ``stale_updates``, ``aggregated_updates``,
      ``wasted_device_seconds``, ``device_seconds``, ``dropouts``, ``started_updates``;
    * ``participation``: {device id: number of steps whose ``participants`` hold it} over every
      device ever in ``selected`` or ``participants``; a device selected but never aggregated and
      kept counts 0; ``participation_histogram``: {count: number of devices with that count};
      ``participation_gini``: :func:`gini` of those counts (None if no device was selected);
    * the keys of ``quartiles`` (e.g. ``slow_q_accuracy``, ``fast_q_accuracy``), passed through.

    Raises
    ------
    ValueError
        On no events, a non-dict event, a missing or non-finite ``virtual_time``, a step that
        ends before it starts, an accuracy that is not a finite number, or a ``quartiles`` key
        that collides with a metric.
    """
    if not events:
        raise ValueError("run_metrics: the run has no round events")
    curve: Curve = []
    durations: list[float] = []
    counts: Counter[int] = Counter()
    seen: set[int] = set()
    tot = dict.fromkeys(TOTALS, 0.0)
    prev_end = 0.0
    for i, e in enumerate(events):
        start, end = _span(e, i, prev_end)
        durations.append(end - start)
        prev_end = end
        if e.get("accuracy") is not None:
            curve.append((int(e.get("round", i)), end / 3600.0, _number(e, "accuracy", i, None)))
        selected, kept = _ids(e, "selected", i), _ids(e, "participants", i)
        seen.update(selected)
        seen.update(kept)
        counts.update(kept)
        _add_totals(tot, e, i, selected)
    participation = {d: counts.get(d, 0) for d in sorted(seen)}
    out = _summary(
        curve, np.asarray(durations, dtype=float), len(events), prev_end, tot, participation
    )
    for k, v in (quartiles or {}).items():
        if k in out:
            raise ValueError(f"run_metrics: quartiles key {k!r} collides with a metric")
        out[k] = v
    return out


def _span(e: Any, i: int, prev_end: float) -> tuple[float, float]:
    """(start, end) virtual seconds of step ``i``; ValueError on a non-dict event, a missing or
    non-finite ``virtual_time`` or an end before the start."""
    if not isinstance(e, Mapping):
        raise ValueError(f"round event {i} must be a dict, got {type(e).__name__}")
    end = _number(e, "virtual_time", i, None)
    start = _number(e, "round_start", i, prev_end) if "round_start" in e else prev_end
    if end < start:
        raise ValueError(f"round event {i}: virtual_time {end:g} is before round_start {start:g}")
    return start, end


def _add_totals(tot: dict[str, float], e: Mapping[str, Any], i: int, selected: list[int]) -> None:
    """Add step ``i``'s stale, aggregated, dropped-out and started updates and its device
    seconds (trained, wasted) to ``tot``."""
    tot["stale_updates"] += len(_ids(e, "stale", i))
    tot["aggregated_updates"] += _number(e, "aggregated", i, 0)
    tot["dropouts"] += len(_ids(e, "dropout", i))
    tot["started_updates"] += len(selected)
    tot["device_seconds"] += _number(e, "device_seconds", i, 0.0)
    tot["wasted_device_seconds"] += _number(e, "wasted_device_seconds", i, 0.0)


def _summary(
    curve: Curve,
    durations: np.ndarray,
    rounds: int,
    end: float,
    tot: dict[str, float],
    participation: dict[int, int],
) -> dict[str, Any]:
    """The metrics of :func:`run_metrics` from its accumulated figures."""
    accs = [a for _, _, a in curve]
    return {
        "final_accuracy": accs[-1] if accs else None,
        "best_accuracy": max(accs) if accs else None,
        "curve": curve,
        "round_durations_s": durations,
        "rounds": rounds,
        "virtual_hours": end / 3600.0,
        "stale_share": _share(tot["stale_updates"], tot["aggregated_updates"]),
        "wasted_compute_share": _share(tot["wasted_device_seconds"], tot["device_seconds"]),
        "dropout_share": _share(tot["dropouts"], tot["started_updates"]),
        **{k: (float(v) if "seconds" in k else int(v)) for k, v in tot.items()},
        "participation": participation,
        "participation_histogram": dict(sorted(Counter(participation.values()).items())),
        "participation_gini": gini(participation.values()) if participation else None,
    }


def time_to_target(curve: Sequence[tuple[int, float, float]], target: float | None) -> float | None:
    """Virtual hours of the first evaluated step whose accuracy reaches ``target``.

    The first ``(round, hours, accuracy)`` of ``curve`` (in run order) with
    ``accuracy >= target - 1e-12`` (the tolerance absorbs the float rounding of a target
    computed as fraction x best accuracy); None if none does, or if ``target`` is None.
    """
    if target is None:
        return None
    for _, hours, acc in curve:
        if acc >= target - TOLERANCE:
            return float(hours)
    return None


def _validate_runs(runs: Sequence[Mapping[str, Any]]) -> None:
    if not runs:
        raise ValueError("study_results: no runs")
    seen: set[tuple[str, Any]] = set()
    for j, r in enumerate(runs):
        missing = [k for k in ("policy", "seed", "events") if k not in r]
        if missing:
            raise ValueError(f"study_results: run {j} lacks {missing[0]!r}")
        key = (str(r["policy"]), r["seed"])
        if key in seen:
            raise ValueError(f"study_results: duplicate run policy={key[0]} seed={key[1]}")
        seen.add(key)


def study_targets(finals: Iterable[tuple[str, float | None]]) -> dict[str, float | None]:
    """Targets ``{"0.8": 0.8 * best, "0.9": 0.9 * best}`` from ``(policy, final accuracy)``.

    ``best = max over policies of mean over that policy's seeds of the final accuracy`` (runs
    without a final accuracy are left out of the mean; None targets when no run has one).
    """
    per: dict[str, list[float]] = {}
    for policy, acc in finals:
        if acc is not None:
            per.setdefault(policy, []).append(acc)
    best = max((float(np.mean(v)) for v in per.values()), default=None)
    return {f"{f:g}": (None if best is None else f * best) for f in FRACTIONS}


def study_results(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One flat record per run (in the order given), with time-to-accuracy on shared targets.

    ``runs``: dicts ``{"policy", "seed", "events", optionally "quartiles", "run_seconds"}``.
    Targets are :func:`study_targets` of every run's final accuracy. Record keys, in order:
    ``policy``, ``seed``, ``final_accuracy``, ``time_to_target_h`` ({"0.8": h, "0.9": h},
    :func:`time_to_target`, None where never reached), ``stale_share``,
    ``wasted_compute_share``, ``participation_gini``, then ``targets``, ``rounds``,
    ``virtual_hours``, ``median_round_s``, ``p90_round_s`` (90th percentile of the round
    durations, linear interpolation), ``dropout_share``, ``slow_q_accuracy``,
    ``fast_q_accuracy`` (from ``quartiles``, None when absent) and ``run_seconds``.

    Raises
    ------
    ValueError
        On no runs, a run missing ``policy``/``seed``/``events``, a duplicate (policy, seed), or
        bad events (see :func:`run_metrics`).
    """
    _validate_runs(runs)
    metrics = [run_metrics(r["events"], quartiles=r.get("quartiles")) for r in runs]
    targets = study_targets(
        (str(r["policy"]), m["final_accuracy"]) for r, m in zip(runs, metrics, strict=True)
    )
    records = []
    for r, m in zip(runs, metrics, strict=True):
        d = m["round_durations_s"]
        records.append(
            {
                "policy": str(r["policy"]),
                "seed": r["seed"],
                "final_accuracy": m["final_accuracy"],
                "time_to_target_h": {k: time_to_target(m["curve"], t) for k, t in targets.items()},
                "stale_share": m["stale_share"],
                "wasted_compute_share": m["wasted_compute_share"],
                "participation_gini": m["participation_gini"],
                "targets": dict(targets),
                "rounds": m["rounds"],
                "virtual_hours": m["virtual_hours"],
                "median_round_s": float(np.median(d)),
                "p90_round_s": float(np.percentile(d, 90)),
                "dropout_share": m["dropout_share"],
                "slow_q_accuracy": m.get("slow_q_accuracy"),
                "fast_q_accuracy": m.get("fast_q_accuracy"),
                "run_seconds": r.get("run_seconds"),
            }
        )
    return records
