"""``main`` of ``benchmarks/stragglers.py``: the study (or a fidelity case), its table, files,
plots and, for a case, the paper's checks."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.straggler_study import core, output, plots, report, scenarios
from benchmarks.straggler_study.cli import parse_args, planned_runs
from simulator.run.runlock import lock_run_dir
from simulator.run.stop import report_stop, sigterm_raises

#: the study's files in ``--out`` (beside ``runs/``, whose cells ``--resume`` keeps)
OUTPUTS = ("results.json", "results.csv", *plots.PLOTS)


def main(argv: list[str] | None = None) -> int:
    """Run the study or ``--scenario``; print the table (and checks); write ``--out``.
    Returns the exit code (2 on a bad config, trace or value, with a one-line error)."""
    a = parse_args(argv)
    from simulator.config.fields import ConfigError
    from simulator.population.traces import TraceError

    t0 = time.perf_counter()
    runs: list[dict[str, Any]] = []  # the runs that finished (or were read back), as they do
    try:
        with sigterm_raises():
            return _run(a, t0, runs)
    except (ConfigError, TraceError, ValueError, ConnectionError) as e:  # ConnectionError: a
        print(f"error: {e}", file=sys.stderr)  # --ray-address where no Ray answers (an OSError,
        return 2  # which the next clause would report as a stop)
    except (KeyboardInterrupt, OSError) as e:  # Ctrl-C, SIGTERM, a full disk: finished runs kept
        kept = f"{len(runs)} of {planned_runs(a)[0]} runs finished under {a.out}"
        return report_stop(e, "benchmarks/stragglers.py", argv, kept)


def _run(a: argparse.Namespace, t0: float, runs: list[dict[str, Any]]) -> int:
    """:func:`_study` holding ``--out``'s lock."""
    import torch

    if a.scenario == "study":  # a bad --set stops here, before --out is made or locked
        from simulator.config.sections import build_config

        build_config(flat=core.base_config(a, 0))
    lock = lock_run_dir(Path(a.out), "--out")  # one study at a time in a directory
    threads = torch.get_num_threads()
    if a.quick:  # its small MLP gains nothing from more threads; on a loaded machine they
        torch.set_num_threads(1)  # wait spinning: 340 CPU-s, 13 min instead of 37 CPU-s
    try:
        return _study(a, t0, runs)
    finally:
        torch.set_num_threads(threads)
        os.close(lock)


def _study(a: argparse.Namespace, t0: float, runs: list[dict[str, Any]]) -> int:
    """The study (or the case), appending each finished run to ``runs``, then its table, files
    and plots (an earlier study's go first: a study stopped before its end leaves none that
    look like its own)."""
    for name in OUTPUTS:
        (Path(a.out) / name).unlink(missing_ok=True)
    if a.scenario != "study":
        runs, settings = scenarios.run(a, runs)
    else:
        runs, settings = core.study(a, runs)
    records = report.study_results(runs)
    out = Path(a.out)
    extra = {"scenario": a.scenario, "settings": settings, "wall_seconds": time.perf_counter() - t0}
    output.write_results(records, out, extra)
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text((out / "results.json").read_text())
    if not a.no_plots:
        plots.plot_study(runs, records, out)
    print(output.table(records))
    if a.scenario != "study":
        lines = scenarios.checks(a.scenario, records, runs)
        print("\n".join(lines))
        extra["checks"] = lines
        output.write_results(records, out, extra)
    print(f"{len(runs)} runs in {time.perf_counter() - t0:.0f} s; results in {out}")
    return 0
