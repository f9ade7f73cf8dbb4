"""Runs, metrics and verdicts of ``benchmarks/heterogeneity.py`` (no argparse, no plotting), so
that spawned worker processes import a plain module and the pieces are testable on their own.

The verdict rule. The arms of one seed share its partition and initial model, so a comparison
is paired by seed: with ``m_i`` and ``b_i`` the method's and the baseline's metric on seed ``i``
(``n`` seeds), the paired difference is ``d_i = m_i - b_i`` for a ``higher`` prediction
(``b_i - m_i`` for ``lower``), so that ``d_i > 0`` means the seed went the claimed way. The
one-sided exact sign-flip permutation test asks how often a random sign pattern of the ``d_i``
gives a mean at least the observed one: ``p`` = (patterns ``s`` in ``{-1, +1}^n`` with
``mean(s * d) >= mean(d)``) / ``2^n``, the observed pattern included (ties count), so that
``p >= 1 / 2^n``: 1/8 with 3 seeds, 1/32 with 5. The verdict is

* **reproduced** when ``p <= 0.05`` (which needs ``mean(d) > 0``, and at least 5 seeds);
* **inconclusive** when the direction holds (``mean(d) > 0``) but ``p > 0.05``;
* **contradicted** otherwise (``mean(d) <= 0``);
* **failed** when a run of the comparison failed (its error is in ``error``).

Beside it, each row keeps the older one-standard-deviation rule (``reproduced``: the gain of
the means exceeds the larger of the two sample standard deviations over seeds, ddof 1) and
``wins``, the seeds on which the method is strictly ahead in the predicted direction. The
arithmetic is in :mod:`benchmarks.heterogeneity_study.stats`.
"""

from __future__ import annotations

import json
import sys
import traceback
from contextlib import closing
from pathlib import Path
from typing import Any

from benchmarks.heterogeneity_study.cases import Case, Comparison
from benchmarks.heterogeneity_study.pool import run_pool
from benchmarks.heterogeneity_study.stats import verdict
from benchmarks.robustness_study.worker import finished_run, init_worker

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
    a failure is recorded in ``error``, never raised. With ``job["resume"]`` a run of the same
    config that an earlier, stopped study finished there is read back instead of run again."""
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
        kept = finished_run(job["flat"]) if job.get("resume") else None
        s = kept[0] if kept is not None else run_experiment(cfg, progress=False)
        rec.update({k: s.get(k) for k in SUMMARY_KEYS})
        rec["curves"] = curves(Path(cfg.output.out) / "events.jsonl")
        for name, score in job.get("scores", {}).items():
            rec[name] = float(score(Path(cfg.output.out)))
    except Exception as e:  # noqa: BLE001 - one failed run must not end the benchmark
        rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        Path(rec["run_dir"]).mkdir(parents=True, exist_ok=True)
        (Path(rec["run_dir"]) / "error.txt").write_text(traceback.format_exc())
    return rec


def finished_runs(jobs: list[dict[str, Any]]) -> int:
    """How many of ``jobs`` have a finished run in their directory (what ``--resume`` keeps)."""
    return sum(1 for j in jobs if finished_run(j["flat"]) is not None)


def run_all(
    jobs: list[dict[str, Any]], workers: int, progress: bool = True
) -> dict[str, dict[str, Any]]:
    """Run the jobs (1 worker: in this process; more: spawned processes, one torch thread
    each) with a progress bar on stderr (without ``progress``: one line per finished run there,
    for logs); ``key -> record``. Stopped (Ctrl-C, SIGTERM), the runs in progress end and the
    queued ones never start (:func:`~benchmarks.heterogeneity_study.pool.run_pool`)."""
    import time

    from tqdm import tqdm

    records: dict[str, dict[str, Any]] = {}
    bar = tqdm(total=len(jobs), desc="runs", unit="run", file=sys.stderr, disable=not progress)
    t0 = time.perf_counter()

    def finished(rec: dict[str, Any]) -> None:
        records[rec["key"]] = rec
        bar.update()
        if not progress:
            err = f" FAILED: {rec['error']}" if rec.get("error") else ""
            took = f"{time.perf_counter() - t0:.0f} s"
            print(f"run {len(records)}/{len(jobs)} {rec['key']} ({took}){err}", file=sys.stderr)

    try:
        if workers == 1 or len(jobs) <= 1:
            import torch

            threads = torch.get_num_threads()
            init_worker()
            try:
                for j in jobs:
                    finished(run_job(j))
            finally:
                torch.set_num_threads(threads)
        else:
            with closing(run_pool(run_job, jobs, min(workers, len(jobs)))) as recs:
                for rec in recs:
                    finished(rec)
    finally:  # a stopped study's bar ends before the line saying how to go on
        bar.close()
    return records


# ------------------------------------------------------------------------------ comparisons

#: the numeric fields of a comparison without a single paired seed (None in its row)
EMPTY = (
    "method_mean",
    "method_std",
    "baseline_mean",
    "baseline_std",
    "gain",
    "paired_diff_mean",
    "paired_diff_std",
    "p_value",
)


def first_reach(rounds: list[Any], accs: list[Any], target: float, total: int) -> int:
    """First round whose accuracy is >= ``target`` (``total + 1`` if none)."""
    for r, a in zip(rounds, accs, strict=True):
        if a is not None and a >= target - 1e-12:
            return int(r)
    return total + 1


def metric_values(
    c: Comparison, method: list[dict[str, Any]], baseline: list[dict[str, Any]]
) -> tuple[list[float], list[float]]:
    """The metric of the method and the baseline run of each seed, paired by position: a seed
    enters only when both runs have the metric (for ``rounds_to_baseline`` the target is the
    baseline run's final accuracy of the same seed)."""
    mv, bv = [], []
    for m, b in zip(method, baseline, strict=True):
        if c.metric != "rounds_to_baseline":
            if m.get(c.metric) is not None and b.get(c.metric) is not None:
                mv.append(float(m[c.metric]))
                bv.append(float(b[c.metric]))
            continue
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
            if mv:
                row.update(verdict(mv, bv, c.direction, c.margin))
            else:
                row.update(dict.fromkeys(EMPTY), reproduced=False, wins=None, paired_diffs=[])
                row["margin"] = c.margin
            row["error"] = errors[0] if errors else None
            if errors or not mv:
                row["reproduced"], row["verdict"] = False, "failed"
            rows.append(row)
    return rows
