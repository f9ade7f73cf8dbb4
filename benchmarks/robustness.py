"""Robustness grid: every defense against one attack, over malicious fractions and seeds.

Runs the grid defense x malicious fraction x seed, each cell a full FedSentry run (``backend
local``) in a pool of worker processes, and writes into ``--out`` (default
``runs/robustness-<attack>``):

* ``runs/<attack>-<defense>-f<fraction>-s<seed>/``: each run's events.jsonl, summary.json, ...
  (fraction 0 is the clean baseline, attack ``none``, run once per defense and seed);
* ``results.json`` / ``results.csv``: one record per run (accuracy, detection precision/recall,
  server seconds per round, error);
* ``accuracy_vs_round.png`` (largest fraction, mean over seeds) and ``accuracy_vs_fraction.png``;
* ``grid.yaml``: the resolved settings (scenario overrides, fractions, seeds, defense params).

A cell whose defense precondition cannot hold (Krum needs n > 2f+2, Bulyan n >= 4f+3, trimmed
mean n > 2f, with f = ceil(fraction x clients per round), at least 1) is recorded as
``n/a (precondition)`` without running; a run that fails mid-way is recorded with its error.

Usage::

    python benchmarks/robustness.py --attack labelflip
    python benchmarks/robustness.py --attack signflip --quick --defenses fedavg krum median
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import robustness_grid as grid  # noqa: E402
from benchmarks.robustness_report import plots, table  # noqa: E402
from simulator.cli import OneLineParser, parse_kv  # noqa: E402

FIELDS = ("attack", "defense", "malicious_fraction", "seed", "final_accuracy", "last5_accuracy",
          "attack_success_rate", "detection_precision", "detection_recall",
          "benign_false_rejection", "server_seconds_per_round", "rounds", "stale_total",
          "precondition_rounds",
          "run_seconds", "ledger_seconds", "error", "run_dir")
QUICK = {"rounds": 20, "seeds": 3, "fractions": [0.0, 0.2, 0.4]}
#: malicious fractions of a scenario (default, quick) where they differ from the others':
#: cross-device studies look at a minority share of the population
FRACTIONS = {"crossdevice": ([0.0, 0.1, 0.2, 0.3], [0.0, 0.1, 0.3])}
DEFAULT_FRACTIONS = ([0.0, 0.2, 0.4, 0.6, 0.8], QUICK["fractions"])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from attacks import ATTACKS, make_attack
    from defenses import DEFENSES, make_defense

    p = OneLineParser(description="Accuracy and detection of every defense against one attack, "
                                  "over malicious fractions and seeds (one FedSentry run per "
                                  "cell).")
    attacks = sorted(set(ATTACKS) - {"none"})
    p.add_argument("--attack", required=True, help=f"attack to benchmark: {attacks}")
    p.add_argument("--defenses", nargs="+", default=sorted(DEFENSES),
                   help=f"defenses to compare (default: all registered: {sorted(DEFENSES)})")
    p.add_argument("--fractions", nargs="+", type=float, default=None,
                   help="fractions of malicious clients; 0 is the clean baseline (attack none) "
                        "(default 0 0.2 0.4 0.6 0.8, crossdevice 0 0.1 0.2 0.3; quick: 0 0.2 "
                        "0.4, crossdevice 0 0.1 0.3)")
    p.add_argument("--seeds", type=int, default=None,
                   help="number of seeds per cell, seeds 0..N-1 (default 3; quick: 3)")
    p.add_argument("--dataset", default=None,
                   help="dataset of every run (default: the scenario's: mnist5k for "
                        "crossdevice, digits for the others)")
    p.add_argument("--clients-per-round", type=int, default=None,
                   help="clients selected a round (default: the scenario's: siren 10, partial "
                        "10, sageflow 20, crossdevice 100)")
    p.add_argument("--rounds", type=int, default=None,
                   help="rounds per run (default: the scenario's, 30; quick: 20)")
    p.add_argument("--quick", action="store_true",
                   help="20 rounds, fewer fractions (see --fractions; about a minute on 2 "
                        "cores, crossdevice about 15); explicit --rounds/--fractions still win")
    p.add_argument("--scenario", default=grid.DEFAULT_SCENARIO, choices=sorted(grid.SCENARIOS),
                   help="siren: Siren's setting, 10 IID clients all selected every round, E=5; "
                        "partial: the README task with an IID split, 20 clients, 10 a round, "
                        "E=5; sageflow: 100 clients, 2-class shards, 20 a round, re-drawn "
                        "attackers, deadline with carry-over; crossdevice: 10^6 virtual "
                        "mnist5k devices (Dirichlet(0.5) label mix), 100 a round, E=1, the "
                        "attackers a fixed share of the population, deadline with carry-over, "
                        "f = expected attackers + 2 binomial std (default: %(default)s)")
    p.add_argument("--out", default=None, help="output directory (default runs/robustness-ATTACK)")
    p.add_argument("--attack-param", type=parse_kv, action="append", default=[],
                   metavar="KEY=VALUE",
                   help="attack parameter (repeatable), e.g. --attack-param scale=10")
    p.add_argument("--defense-param", type=parse_kv, action="append", default=[],
                   metavar="DEFENSE.KEY=VALUE",
                   help="a defense parameter over the scenario's preset (repeatable), e.g. "
                        "--defense-param siren.variant=paper (Siren's paper rules), "
                        "--defense-param median.bucket=2")
    p.add_argument("--set", type=parse_kv, action="append", default=[], metavar="KEY=VALUE",
                   dest="overrides", help="extra flat config override for every run "
                                          "(repeatable), e.g. --set num_clients=8")
    p.add_argument("--ray-address", default=None,
                   help="run the grid on an existing Ray cluster (default: a local Ray)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                   help="runs in parallel on a pool of Ray actors, one CPU and one torch "
                        "thread each (1 = in this process; default: CPU count)")
    p.add_argument("--ledger", action="store_true",
                   help="record every run on FLChain (an embedded devnet per run); audit "
                        "afterwards with `python -m ledger.audit OUT`")
    p.add_argument("--ledger-url", default=None, metavar="URL",
                   help="record on this JSON-RPC node instead (implies --ledger; runs go one "
                        "at a time: they share the aggregator account)")
    p.add_argument("--committee", type=int, default=None,
                   help="edge validators attesting each recorded round with BLS (default 4; "
                        "0 = none)")
    args = p.parse_args(argv)

    if args.attack not in ATTACKS or args.attack == "none":
        p.error(f"unknown attack {args.attack!r}; valid: {attacks}")
    bad = [d for d in args.defenses if d not in DEFENSES]
    if bad:
        p.error(f"unknown defense {bad[0]!r}; valid: {sorted(DEFENSES)}")
    try:
        make_attack(args.attack, **dict(args.attack_param))
    except ValueError as e:
        p.error(f"--attack-param: {e}")
    args.defense_params = {}
    for key, value in args.defense_param:
        name, dot, param = key.partition(".")
        if not dot or not param or name not in DEFENSES:
            p.error(f"--defense-param {key}={value}: expected DEFENSE.KEY=VALUE with DEFENSE "
                    f"in {sorted(DEFENSES)}")
        args.defense_params.setdefault(name, {})[param] = value
    for name, params in args.defense_params.items():
        try:
            make_defense(name, **params)
        except ValueError as e:
            p.error(f"--defense-param: {e}")
    args.rounds = args.rounds or (QUICK["rounds"] if args.quick else None)
    args.seeds = args.seeds or (QUICK["seeds"] if args.quick else 3)
    full, quick = FRACTIONS.get(args.scenario, DEFAULT_FRACTIONS)
    args.fractions = args.fractions or (quick if args.quick else full)
    if any(not 0 <= f < 1 for f in args.fractions) or args.seeds < 1 or args.workers < 1 \
            or (args.rounds is not None and args.rounds < 1) \
            or (args.clients_per_round is not None and args.clients_per_round < 1):
        p.error("--fractions must be in [0, 1); --seeds, --rounds, --workers, "
                "--clients-per-round >= 1")
    args.fractions = sorted(set(args.fractions))
    if args.ledger_url is not None:
        args.ledger, args.workers = True, 1
    args.out = Path(args.out or f"runs/robustness-{args.attack}")
    return args


def make_jobs(args: argparse.Namespace, base: dict[str, Any]) -> list[dict[str, Any]]:
    from defenses import DEFENSES

    n, rounds = int(base["clients_per_round"]), int(base["rounds"])
    jobs = []
    for d in args.defenses:
        for frac in args.fractions:
            attack = args.attack if frac > 0 else "none"
            params, na = grid.defense_preset(d, frac, n, rounds, set(DEFENSES), args.scenario)
            params = {**params, **args.defense_params.get(d, {})}
            for s in range(args.seeds):
                out = args.out / "runs" / f"{attack}-{d}-f{frac:g}-s{s}"
                flat = {**base, "seed": s, "defense": d, "defense_params": params,
                        "attack": attack, "attack_fraction": frac,
                        "attack_params": dict(args.attack_param) if frac > 0 else {},
                        "backend": "local", "progress": False, "plots": False,
                        "out": str(out)}
                jobs.append({"attack": attack, "defense": d, "malicious_fraction": frac,
                             "seed": s, "flat": flat, "error": na})
    return jobs


def run_all(jobs: list[dict[str, Any]], workers: int, ray_address: str | None = None
            ) -> list[dict[str, Any]]:
    from tqdm import tqdm

    results: list[dict[str, Any]] = []
    bar = tqdm(total=len(jobs), desc="runs", unit="run", file=sys.stderr)
    if workers == 1:
        import torch

        threads = torch.get_num_threads()
        grid.init_worker()
        try:
            for j in jobs:
                results.append(grid.run_job(j))
                bar.update()
        finally:
            torch.set_num_threads(threads)
    else:
        # a pool of Ray actors, one CPU and one torch thread each; each run trains its clients
        # in-process (the stacked trainer), so the grid's parallelism is across runs
        from actors.ray_setup import ensure_ray

        ensure_ray(ray_address)
        import ray
        from ray.util import ActorPool

        worker = ray.remote(num_cpus=1)(grid.GridWorker)
        pool = ActorPool([worker.remote() for _ in range(workers)])
        for rec in pool.map_unordered(lambda a, j: a.run.remote(j), jobs):
            results.append(rec)
            bar.update()
        for a in pool._idle_actors:  # noqa: SLF001 - all are idle once the map is drained
            ray.kill(a)
    bar.close()
    order = {(j["defense"], j["malicious_fraction"], j["seed"]): i for i, j in enumerate(jobs)}
    return sorted(results, key=lambda r: order[(r["defense"], r["malicious_fraction"],
                                                r["seed"])])


def main(argv: list[str] | None = None) -> int:
    import yaml

    args = parse_args(argv)
    ledger: dict[str, Any] = {"ledger": args.ledger, "ledger_url": args.ledger_url}
    if args.clients_per_round is not None:
        ledger["clients_per_round"] = args.clients_per_round
    if args.committee is not None:
        ledger["committee"] = args.committee
    try:
        base = grid.resolve_scenario(args.scenario, args.dataset, args.rounds,
                                     {**dict(args.overrides), **ledger})
        from simulator.config.sections import build_config

        build_config(flat={**base, "backend": "local"})  # fail fast on a bad override
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    jobs = make_jobs(args, base)
    (args.out / "grid.yaml").write_text(yaml.safe_dump({
        "attack": args.attack, "attack_params": dict(args.attack_param),
        "scenario": args.scenario, "config": base, "defenses": args.defenses,
        "fractions": args.fractions, "seeds": list(range(args.seeds)),
        "workers": args.workers, "runs": len(jobs),
        "defense_params": {f"{j['defense']}@{j['malicious_fraction']:g}":
                           j["flat"]["defense_params"] for j in jobs if j["seed"] == 0},
    }, sort_keys=False))
    results = run_all(jobs, args.workers, args.ray_address)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    with (args.out / "results.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(results)
    plots(results, args.defenses, args.fractions, args.out)
    print(f"attack {args.attack}, scenario {args.scenario}, {base['rounds']} rounds, "
          f"{args.seeds} seed(s); final accuracy mean±std over seeds; P/R: detection "
          "precision/recall of the malicious updates; FR: benign false-rejection rate; ASR: "
          "backdoor success; skipN: rounds skipped on the rule's precondition (mean)")
    if args.scenario in grid.BINOMIAL_F:
        print(f"f of krum/multikrum/bulyan/trimmedmean: expected attackers of a cohort of "
              f"{base['clients_per_round']} + {grid.F_MARGIN_SD:g} binomial std")
    print(table(results, args.defenses, args.fractions))
    failed = [r for r in results if r["error"] and not r["error"].startswith("n/a")]
    for r in failed:
        print(f"error: {r['defense']} f={r['malicious_fraction']:g} s{r['seed']}: "
              f"{r['error']}", file=sys.stderr)
    if args.ledger:
        done = [r for r in results if r.get("ledger_seconds") is not None]
        led = sum(r["ledger_seconds"] for r in done)
        tot = sum(r["run_seconds"] for r in done)
        print(f"ledger: {len(done)} runs recorded; the runs waited {led:.1f} s of "
              f"{tot:.1f} s for their recorder ({100 * led / max(tot, 1e-9):.1f}%); audit "
              f"with: python -m ledger.audit {args.out} --jobs 2")
    print(f"wrote {args.out}/results.json, results.csv, accuracy_vs_round.png, "
          "accuracy_vs_fraction.png, grid.yaml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
