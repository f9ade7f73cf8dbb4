"""``main`` of ``benchmarks/robustness.py``: resolve the scenario, run the grid, write its files
and print its table."""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from typing import Any

from benchmarks.robustness_study import grid
from benchmarks.robustness_study.cli import parse_args
from benchmarks.robustness_study.core import make_jobs, run_all
from benchmarks.robustness_study.report import plots, table
from benchmarks.robustness_study.worker import finished_run
from simulator.run.runlock import lock_run_dir
from simulator.run.stop import DiskFull, report_stop, sigterm_raises

#: the columns of results.csv
FIELDS = (
    "attack",
    "defense",
    "malicious_fraction",
    "seed",
    "final_accuracy",
    "last5_accuracy",
    "attack_success_rate",
    "detection_precision",
    "detection_recall",
    "benign_false_rejection",
    "server_seconds_per_round",
    "rounds",
    "stale_total",
    "precondition_rounds",
    "run_seconds",
    "ledger_seconds",
    "error",
    "run_dir",
)


#: the grid's files in ``--out`` besides ``grid.yaml`` (and ``runs/``, kept for ``--resume``)
OUTPUTS = ("results.json", "results.csv", "accuracy_vs_round.png", "accuracy_vs_fraction.png")


def main(argv: list[str] | None = None) -> int:
    """Run the grid; write ``--out`` and print the table. Returns the exit code: 2 on a bad
    scenario, override or defense parameter (a one-line error, before any run), 1 when runs
    failed (:func:`failed_runs`; the table and files are written first), else 0 (cells whose
    precondition cannot hold are ``n/a (precondition)``, not failures)."""
    args = parse_args(argv)
    ledger: dict[str, Any] = {"ledger": args.ledger, "ledger_url": args.ledger_url}
    if args.clients_per_round is not None:
        ledger["clients_per_round"] = args.clients_per_round
    if args.committee is not None:
        ledger["committee"] = args.committee
    try:
        base = grid.resolve_scenario(
            args.scenario, args.dataset, args.rounds, {**dict(args.overrides), **ledger}
        )
        from simulator.config.sections import build_config

        build_config(flat={**base, "backend": "local"})  # fail fast on a bad override
        jobs = make_jobs(args, base)  # fail fast on defense parameters that build no rule
        lock = lock_run_dir(args.out, "--out")  # one grid at a time in a directory
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        with sigterm_raises():
            return _run(args, base, jobs)
    except (KeyboardInterrupt, DiskFull, OSError) as e:  # every finished run is kept
        kept = f"{finished(jobs)} runs finished under {args.out}"
        return report_stop(e, "benchmarks/robustness.py", argv, kept)
    finally:
        os.close(lock)


def _run(args: argparse.Namespace, base: dict[str, Any], jobs: list[dict[str, Any]]) -> int:
    """Run the grid's ``jobs``; write ``--out`` and print the table. Returns the exit code."""
    args.out.mkdir(parents=True, exist_ok=True)
    if args.resume:
        print(f"resume: {finished(jobs)} runs finished under {args.out}", file=sys.stderr)
    write_grid_yaml(args, base, jobs)
    for name in OUTPUTS:  # an earlier grid's: a grid stopped before its end leaves none
        (args.out / name).unlink(missing_ok=True)
    results = run_all(jobs, args.workers, args.ray_address)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    with (args.out / "results.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(results)
    plots(results, args.defenses, args.fractions, args.out)
    summarize(args, base, results)
    failed = failed_runs(results)
    if failed:
        ran = sum(1 for r in results if not is_na(r))
        print(
            f"error: {len(failed)} of {ran} runs failed (listed above, and in "
            f"{args.out}/results.json); tracebacks: error.txt in each one's run directory",
            file=sys.stderr,
        )
        return 1
    return 0


def is_na(rec: dict[str, Any]) -> bool:
    """Whether ``rec`` is a cell the grid did not run: its precondition cannot hold."""
    return bool(rec["error"]) and rec["error"].startswith("n/a (precondition)")


def failed_runs(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of the runs that ended in an error (every one but the ``n/a
    (precondition)`` cells the grid did not run; a run that stopped on a "needs ..." included)."""
    return [r for r in results if r["error"] and not is_na(r)]


def finished(jobs: list[dict[str, Any]]) -> str:
    """``"K of N"``: the grid's runs (cells with no precondition error) already finished."""
    runnable = [j for j in jobs if not j["error"]]
    kept = sum(1 for j in runnable if finished_run(j["flat"]) is not None)
    return f"{kept} of {len(runnable)}"


def write_grid_yaml(
    args: argparse.Namespace, base: dict[str, Any], jobs: list[dict[str, Any]]
) -> None:
    """``grid.yaml``: the resolved settings (scenario config, fractions, seeds, defense params
    per defense and fraction)."""
    import yaml

    (args.out / "grid.yaml").write_text(
        yaml.safe_dump(
            {
                "attack": args.attack,
                "attack_params": dict(args.attack_param),
                "scenario": args.scenario,
                "config": base,
                "defenses": args.defenses,
                "fractions": args.fractions,
                "seeds": list(range(args.seeds)),
                "workers": args.workers,
                "runs": len(jobs),
                "defense_params": {
                    f"{j['defense']}@{j['malicious_fraction']:g}": j["flat"]["defense_params"]
                    for j in jobs
                    if j["seed"] == 0
                },
            },
            sort_keys=False,
        )
    )


def summarize(
    args: argparse.Namespace, base: dict[str, Any], results: list[dict[str, Any]]
) -> None:
    """Print the legend, the table, the failed runs (stderr) and the ledger's share."""
    print(
        f"attack {args.attack}, scenario {args.scenario}, {base['rounds']} rounds, "
        f"{args.seeds} seed(s); final accuracy mean±std over seeds; P/R: detection "
        "precision/recall of the malicious updates; FR: benign false-rejection rate; ASR: "
        "backdoor success; skipN: rounds skipped on the rule's precondition (mean)"
    )
    if args.scenario in grid.BINOMIAL_F:
        print(
            f"f of krum/multikrum/bulyan/trimmedmean: expected attackers of a cohort of "
            f"{base['clients_per_round']} + {grid.F_MARGIN_SD:g} binomial std"
        )
    print(table(results, args.defenses, args.fractions))
    for r in failed_runs(results):
        print(
            f"error: {r['defense']} f={r['malicious_fraction']:g} s{r['seed']}: {r['error']}",
            file=sys.stderr,
        )
    if args.ledger:
        done = [r for r in results if r.get("ledger_seconds") is not None]
        led = sum(r["ledger_seconds"] for r in done)
        tot = sum(r["run_seconds"] for r in done)
        print(
            f"ledger: {len(done)} runs recorded; the runs waited {led:.1f} s of "
            f"{tot:.1f} s for their recorder ({100 * led / max(tot, 1e-9):.1f}%); audit "
            f"with: python -m ledger.audit {args.out} --jobs 2"
        )
    print(
        f"wrote {args.out}/results.json, results.csv, accuracy_vs_round.png, "
        "accuracy_vs_fraction.png, grid.yaml"
    )
