"""The one-run worker of ``benchmarks/robustness.py``: runs one grid cell and returns its result
record (in this process, or on a Ray actor, :class:`GridWorker`).

Kept apart from the script so that spawned worker processes import a plain module (no argparse,
no plotting).
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any


def init_worker() -> None:
    """Worker processes train on one thread each (``--workers`` processes share the cores)."""
    import torch

    torch.set_num_threads(1)


class GridWorker:
    """A Ray actor that runs grid cells one after another on one torch thread."""

    def __init__(self) -> None:
        init_worker()

    def run(self, job: dict[str, Any]) -> dict[str, Any]:
        return run_job(job)


def _server_seconds(events: list[dict[str, Any]]) -> float | None:
    """Mean per-round wall time not spent in client training: (last cumulative wall_time -
    sum of slowest_train_seconds) / rounds. Includes defense, clock, bookkeeping and evaluation."""
    if not events:
        return None
    wall = events[-1].get("wall_time") or 0.0
    train = sum(e.get("slowest_train_seconds") or 0.0 for e in events)
    return max(wall - train, 0.0) / len(events)


def finished_run(flat: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """The summary and events of a run of exactly ``flat``'s config that finished in its
    ``out`` directory, else None (none there, another config, a ``summary.json`` that is no
    JSON object, or stopped before its end: a run's ``summary.json`` is written last, and
    removed when a run starts there)."""
    import json

    import yaml

    from simulator.config.sections import build_config
    from simulator.run.output import read_events

    out = Path(flat["out"])
    try:
        saved = yaml.safe_load((out / "config.yaml").read_text())
        summary = json.loads((out / "summary.json").read_text())
        events = read_events(out / "events.jsonl")
    except (OSError, ValueError, yaml.YAMLError):  # missing, or torn by a kill mid-write
        return None
    if not isinstance(summary, dict):  # valid JSON, but not a run's summary: run it again
        return None
    want = build_config(flat=flat).to_dict()
    for d in (saved, want):  # where the grid is: a grid moved or copied elsewhere goes on
        if isinstance(d, dict) and isinstance(d.get("output"), dict):
            d["output"].pop("out", None)
    if saved != want or summary.get("rounds") != len(events):
        return None
    return summary, events


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Run one grid cell (a dict made by the script) and return its result record; a failure
    (precondition ValueError mid-run, anything else) is recorded in ``error`` and its traceback
    in the run directory's ``error.txt``, never raised, except a full disk: the record then
    names the file in ``disk_full`` (the grid stops)
    With ``job["resume"]`` a run of the cell an earlier grid finished is read back instead
    (:func:`finished_run`)."""
    rec = {k: job[k] for k in ("attack", "defense", "malicious_fraction", "seed")}
    rec.update(
        final_accuracy=None,
        last5_accuracy=None,
        attack_success_rate=None,
        detection_precision=None,
        detection_recall=None,
        benign_false_rejection=None,
        server_seconds_per_round=None,
        rounds=None,
        stale_total=None,
        precondition_rounds=None,
        run_seconds=None,
        ledger_seconds=None,
        defense_params=job["flat"].get("defense_params", {}),
        error=job.get("error"),
        run_dir=job["flat"]["out"],
    )
    if rec["error"]:
        return rec
    try:
        (Path(job["flat"]["out"]) / "error.txt").unlink(missing_ok=True)  # an earlier grid's
        from simulator.config.sections import build_config
        from simulator.run.experiment import run_experiment
        from simulator.run.output import read_events

        cfg = build_config(flat=job["flat"])
        kept = finished_run(job["flat"]) if job.get("resume") else None
        if kept is not None:  # an earlier grid's run of this very cell: read, not run again
            s, events = kept
        else:
            s = run_experiment(cfg, progress=False)
            events = read_events(Path(cfg.output.out) / "events.jsonl")
        rec.update(
            {
                k: s.get(k)
                for k in (
                    "final_accuracy",
                    "last5_accuracy",
                    "detection_precision",
                    "detection_recall",
                    "benign_false_rejection",
                    "rounds",
                    "stale_total",
                    "precondition_rounds",
                )
            }
        )
        rec["attack_success_rate"] = s.get("attack_success_rate")
        rec["run_seconds"] = s.get("run_seconds")
        rec["ledger_seconds"] = (s.get("ledger") or {}).get("ledger_seconds")
        rec["server_seconds_per_round"] = _server_seconds(events)
    except Exception as e:  # noqa: BLE001 - one bad cell must not end the grid
        from simulator.run.appendlog import is_disk_full

        if is_disk_full(e):  # not the cell's fault, and every cell after it would fail too
            rec["disk_full"] = getattr(e, "filename", None) or job["flat"]["out"]
            return rec
        rec["error"] = f"{type(e).__name__}: {e}"  # ConfigError, preconditions: ValueErrors
        Path(job["flat"]["out"]).mkdir(parents=True, exist_ok=True)
        (Path(job["flat"]["out"]) / "error.txt").write_text(traceback.format_exc())
    return rec
