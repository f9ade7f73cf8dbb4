"""Runs, metrics and verdicts of ``benchmarks/heterogeneity.py`` (no argparse, no plotting), so
that spawned worker processes import a plain module and the pieces are testable on their own.

The verdict rule (:func:`verdict`): with ``m`` and ``b`` the means over seeds of the method's
and the baseline's metric, ``s_m`` and ``s_b`` their sample standard deviations over seeds
(``ddof = 1``; 0 with a single seed) and ``d = m - b`` for a ``higher`` prediction (``b - m``
for ``lower``), the claim is *reproduced* when ``d > max(s_m, s_b)``: the method beats the
baseline in the predicted direction by more than the larger of the two spreads. A tie, a
smaller gain, a loss, or a run that failed is *not reproduced*.

Beside the verdict, ``wins`` counts the seeds on which the method beats the baseline strictly in
the predicted direction (the arms of one seed share its partition, so the pairing is by seed).
It is information for the reader, not part of the rule: a method can win every seed and still
not be reproduced when the baseline's seed-to-seed spread is larger than the gain.
"""

from __future__ import annotations

import json
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.heterogeneity_study.cases import Case, Comparison
from benchmarks.robustness_study.grid import init_worker

#: keys of a run record copied from the run's summary
SUMMARY_KEYS = (
    "final_accuracy",
    "last5_accuracy",
    "final_loss",
    "client_accuracy_mean",
    "client_accuracy_std",
    "client_accuracy_worst10",
    "upload_volume",
    "rounds",
    "run_seconds",
)


@dataclass(frozen=True)
class Stat:
    """Mean and sample standard deviation of a metric over seeds."""

    mean: float
    std: float


def stat(values: list[float]) -> Stat:
    """Mean and sample std (ddof 1; 0 for a single value) of ``values`` (ValueError if empty)."""
    if not values:
        raise ValueError("no values to summarize")
    v = np.asarray(values, dtype=np.float64)
    return Stat(float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0)


def verdict(method: list[float], baseline: list[float], direction: str) -> dict[str, Any]:
    """Means, stds, the signed gain ``d``, ``reproduced`` (the module docstring's rule) and
    ``wins``: seeds won in the predicted direction, pairing the lists by position (None when
    their lengths differ, i.e. a run failed)."""
    if direction not in ("higher", "lower"):
        raise ValueError(f"direction must be 'higher' or 'lower', got {direction!r}")
    m, b = stat(method), stat(baseline)
    sign = 1.0 if direction == "higher" else -1.0
    gain = sign * (m.mean - b.mean)
    wins = (
        sum(sign * (x - y) > 0 for x, y in zip(method, baseline, strict=True))
        if len(method) == len(baseline)
        else None
    )
    return {
        "method_mean": m.mean,
        "method_std": m.std,
        "baseline_mean": b.mean,
        "baseline_std": b.std,
        "gain": gain,
        "reproduced": bool(gain > max(m.std, b.std)),
        "wins": wins,
    }


# ------------------------------------------------------------------------------ jobs and runs


def run_key(flat: dict[str, Any], seed: int) -> str:
    """Identity of one run: its whole flat config and seed (runs with equal keys run once)."""
    return json.dumps({**flat, "seed": seed}, sort_keys=True, default=str)


def make_jobs(
    cases: list[Case], quick: bool, seeds: int, out: Path
) -> tuple[list[dict[str, Any]], dict[tuple[str, str, int], str]]:
    """The distinct runs of ``cases`` (seeds ``0..seeds-1``) and ``(case, arm, seed) -> key``.

    A run's directory is ``out/runs/<case>/<arm>-s<seed>`` of the first case declaring it; a
    run shared by several cases carries the ``scores`` of all of them.
    """
    jobs: dict[str, dict[str, Any]] = {}
    index: dict[tuple[str, str, int], str] = {}
    for case in cases:
        for arm in case.arms:
            flat = case.flat(arm, quick)
            for s in range(seeds):
                key = run_key(flat, s)
                index[(case.name, arm, s)] = key
                if key not in jobs:
                    run_dir = out / "runs" / case.name / f"{arm}-s{s}"
                    jobs[key] = {
                        "key": key,
                        "case": case.name,
                        "arm": arm,
                        "seed": s,
                        "flat": {**flat, "seed": s, "out": str(run_dir)},
                        "scores": {},
                    }
                jobs[key]["scores"].update(case.scores)
    return list(jobs.values()), index


def curves(events_path: Path) -> dict[str, list[float | None]]:
    """Per evaluated round: ``round`` (1-based), ``accuracy``, ``client_accuracy_mean``."""
    out: dict[str, list[float | None]] = {"round": [], "accuracy": [], "client_accuracy_mean": []}
    if not events_path.is_file():
        return out
    for line in events_path.read_text().splitlines():
        if not line.strip():
            continue
        e = json.loads(line)
        if e.get("accuracy") is None:
            continue
        out["round"].append(int(e["round"]) + 1)
        out["accuracy"].append(e["accuracy"])
        out["client_accuracy_mean"].append(e.get("client_accuracy_mean"))
    return out


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Run one job (from :func:`make_jobs`), then each of its ``scores`` on the run's directory;
    a failure is recorded in ``error``, never raised."""
    rec: dict[str, Any] = {
        "key": job["key"],
        "run_dir": job["flat"]["out"],
        "error": None,
        **dict.fromkeys(SUMMARY_KEYS),
    }
    try:
        from simulator.config.sections import build_config
        from simulator.run.experiment import run_experiment

        cfg = build_config(flat=job["flat"])
        s = run_experiment(cfg, progress=False)
        rec.update({k: s.get(k) for k in SUMMARY_KEYS})
        rec["curves"] = curves(Path(cfg.output.out) / "events.jsonl")
        for name, score in job.get("scores", {}).items():
            rec[name] = float(score(Path(cfg.output.out)))
    except Exception as e:  # noqa: BLE001 - one failed run must not end the benchmark
        rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        Path(rec["run_dir"]).mkdir(parents=True, exist_ok=True)
        (Path(rec["run_dir"]) / "error.txt").write_text(traceback.format_exc())
    return rec


def run_all(
    jobs: list[dict[str, Any]], workers: int, progress: bool = True
) -> dict[str, dict[str, Any]]:
    """Run the jobs (1 worker: in this process; more: spawned processes, one torch thread
    each) with a progress bar on stderr (unless ``progress`` is False); ``key -> record``."""
    from tqdm import tqdm

    records: dict[str, dict[str, Any]] = {}
    bar = tqdm(total=len(jobs), desc="runs", unit="run", file=sys.stderr, disable=not progress)
    if workers == 1 or len(jobs) <= 1:
        import torch

        threads = torch.get_num_threads()
        init_worker()
        try:
            for j in jobs:
                records[j["key"]] = run_job(j)
                bar.update()
        finally:
            torch.set_num_threads(threads)
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(
            min(workers, len(jobs)), mp_context=mp.get_context("spawn"), initializer=init_worker
        ) as pool:
            for fut in as_completed([pool.submit(run_job, j) for j in jobs]):
                rec = fut.result()
                records[rec["key"]] = rec
                bar.update()
    bar.close()
    return records


# ------------------------------------------------------------------------------ comparisons


def first_reach(rounds: list[Any], accs: list[Any], target: float, total: int) -> int:
    """First round whose accuracy is >= ``target`` (``total + 1`` if none)."""
    for r, a in zip(rounds, accs, strict=True):
        if a is not None and a >= target - 1e-12:
            return int(r)
    return total + 1


def metric_values(
    c: Comparison, method: list[dict[str, Any]], baseline: list[dict[str, Any]]
) -> tuple[list[float], list[float]]:
    """The metric of each successful method / baseline run (paired by seed for
    ``rounds_to_baseline``: the target is the baseline run's final accuracy)."""
    if c.metric != "rounds_to_baseline":
        return (
            [r[c.metric] for r in method if r.get(c.metric) is not None],
            [r[c.metric] for r in baseline if r.get(c.metric) is not None],
        )
    mv, bv = [], []
    for m, b in zip(method, baseline, strict=True):
        if m.get("curves") is None or b.get("curves") is None or b["final_accuracy"] is None:
            continue
        target = b["final_accuracy"]
        mv.append(
            float(first_reach(m["curves"]["round"], m["curves"]["accuracy"], target, m["rounds"]))
        )
        bv.append(
            float(first_reach(b["curves"]["round"], b["curves"]["accuracy"], target, b["rounds"]))
        )
    return mv, bv


def compare(
    cases: list[Case],
    index: dict[tuple[str, str, int], str],
    records: dict[str, dict[str, Any]],
    seeds: int,
    quick: bool,
) -> list[dict[str, Any]]:
    """One result row per comparison of every case (the ``--json`` entries)."""
    rows = []
    for case in cases:
        for c in case.comparisons:
            m = [records[index[(case.name, c.method, s)]] for s in range(seeds)]
            b = [records[index[(case.name, c.baseline, s)]] for s in range(seeds)]
            mv, bv = metric_values(c, m, b)
            row: dict[str, Any] = {
                "case": case.name,
                "method": c.method,
                "baseline": c.baseline,
                "metric": c.metric,
                "direction": c.direction,
                "claim": case.claim,
                "seeds": seeds,
                "mode": "quick" if quick else "full",
                "method_values": mv,
                "baseline_values": bv,
            }
            errors = [r["error"] for r in m + b if r["error"]]
            if mv and bv:
                row.update(verdict(mv, bv, c.direction))
            else:
                row.update(
                    method_mean=None,
                    method_std=None,
                    baseline_mean=None,
                    baseline_std=None,
                    gain=None,
                    reproduced=False,
                    wins=None,
                )
            row["error"] = errors[0] if errors else None
            row["reproduced"] = bool(row["reproduced"]) and not errors
            rows.append(row)
    return rows
