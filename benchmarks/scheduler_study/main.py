"""``main`` of ``benchmarks/scheduler.py``: run the parts, print their tables and checks, write
the outputs."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from benchmarks.scheduler_study import live as live_mod
from benchmarks.scheduler_study import predictor as pred
from benchmarks.scheduler_study.cli import parse_args
from benchmarks.scheduler_study.core import instances_part, recorded, run_plan, write_csv
from benchmarks.scheduler_study.instances import instance_checks
from benchmarks.scheduler_study.plot import plot
from benchmarks.stops import run_stoppable, whole, write_text


def _shown(lines: list[str]) -> list[str]:
    """Print ``lines`` (check results) and return them."""
    print("\n".join(lines))
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run the parts; print their tables and checks; write the outputs (each file whole).
    Returns the exit code (2 on a bad config, 130 / 143 when stopped, with one line)."""
    a = parse_args(argv)
    return run_stoppable("scheduler", lambda: _parts(a))


def _parts(a: argparse.Namespace) -> int:
    """:func:`main`'s work."""
    from simulator.config.fields import ConfigError

    t0 = time.perf_counter()
    doc: dict[str, Any] = {"instances": [], "predictor": {}, "live": []}
    notes: list[str] = []
    lines: list[str] = []
    points: dict[str, Any] = {}
    a.out.mkdir(parents=True, exist_ok=True)
    try:
        if "instances" in a.parts:
            doc["instances"], note = instances_part(a)
            notes.append(note)
            lines += _shown(instance_checks(doc["instances"]))
        if "live" in a.parts or "predictor" in a.parts:
            runs, setups = recorded(a)
            if "live" in a.parts:
                doc["live"] = live_mod.summarize(runs, a.live)
                print(live_mod.table(doc["live"]))
                lines += _shown(live_mod.checks(doc["live"]))
            if "predictor" in a.parts:
                doc["predictor"], points = pred.evaluate(runs, setups, a.ga_params)
                print(pred.table(doc["predictor"]))
                lines += _shown(pred.predictor_checks(doc["predictor"]))
    except (ConfigError, ValueError) as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    text = json.dumps(doc, indent=2)
    write_text(a.out / "results.json", text)
    if a.json is not None:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        write_text(a.json, text)
    for rows, name in ((doc["live"], "live.csv"), (doc["instances"], "instances.csv")):
        with whole(a.out / name) as tmp:
            write_csv(rows, tmp)
    settings = {
        "mode": a.mode,
        "parts": a.parts,
        "tasks": a.tasks,
        "seed": a.seed,
        "extra": a.extra,
        "ga_params": a.ga_params,
        "plan": run_plan(a),
        "checks": lines,
        "notes": notes,
        "wall_seconds": time.perf_counter() - t0,
    }
    write_text(a.out / "settings.json", json.dumps(settings, indent=2, default=str))
    if not a.no_plots:
        with whole(a.out / "scheduler.png") as tmp:
            plot(doc["live"], points, tmp)
    print(f"done in {time.perf_counter() - t0:.0f} s; results in {a.out}")
    return 0
