"""Command line of ``benchmarks/robustness.py`` (every flag explained in ``--help``)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from benchmarks.robustness_study import grid
from simulator.cli import OneLineParser, parse_kv

QUICK = {"rounds": 20, "seeds": 3, "fractions": [0.0, 0.2, 0.4]}
#: malicious fractions of a scenario (default, quick) where they differ from the others':
#: cross-device studies look at a minority share of the population
FRACTIONS = {"crossdevice": ([0.0, 0.1, 0.2, 0.3], [0.0, 0.1, 0.3])}
DEFAULT_FRACTIONS = ([0.0, 0.2, 0.4, 0.6, 0.8], QUICK["fractions"])
#: the most rounds a run may ask for: far beyond any study (a round takes a millisecond at the
#: least, so 10**9 of them are 11 days), and well inside what the engine's counters and progress
#: bar hold (``--rounds 10**20`` failed every run with an OverflowError)
MAX_ROUNDS = 10**9
#: the most runs (defenses x fractions x seeds) a grid may have: every run's job (~1 KB: its
#: flat config) is built before the first starts, so 10**5 of them hold ~100 MB, and a run
#: takes seconds at the least, so such a grid is days of work (the default grid has 180 runs);
#: ``--seeds 99999999999999`` filled the memory without bound
MAX_RUNS = 100_000


def build_parser(attacks: list[str], defenses: list[str]) -> OneLineParser:
    """The parser of every flag (checked further by :func:`parse_args`); ``attacks`` and
    ``defenses``: the registered names, for the help."""
    p = OneLineParser(
        description="Accuracy and detection of every defense against one attack, "
        "over malicious fractions and seeds (one FedSentry run per "
        "cell)."
    )
    p.add_argument("--attack", required=True, help=f"attack to benchmark: {attacks}")
    p.add_argument(
        "--defenses",
        nargs="+",
        default=defenses,
        help=f"defenses to compare (default: all registered: {defenses})",
    )
    p.add_argument(
        "--fractions",
        nargs="+",
        type=float,
        default=None,
        help="fractions of malicious clients; 0 is the clean baseline (attack none) "
        "(default 0 0.2 0.4 0.6 0.8, crossdevice 0 0.1 0.2 0.3; quick: 0 0.2 "
        "0.4, crossdevice 0 0.1 0.3)",
    )
    p.add_argument(
        "--seeds",
        type=int,
        default=None,
        help="number of seeds per cell, seeds 0..N-1 (default 3; quick: 3)",
    )
    p.add_argument(
        "--dataset",
        default=None,
        help="dataset of every run (default: the scenario's: mnist5k for "
        "crossdevice, digits for the others)",
    )
    p.add_argument(
        "--clients-per-round",
        type=int,
        default=None,
        help="clients selected a round (default: the scenario's: siren 10, partial "
        "10, sageflow 20, crossdevice 100)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="rounds per run (default: the scenario's, 30; quick: 20)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="20 rounds, fewer fractions (see --fractions; about a minute on 2 "
        "cores, crossdevice about 7 minutes); explicit --rounds/--fractions still win",
    )
    p.add_argument(
        "--scenario",
        default=grid.DEFAULT_SCENARIO,
        choices=sorted(grid.SCENARIOS),
        help="siren: Siren's setting, 10 IID clients all selected every round, E=5; "
        "partial: the README task with an IID split, 20 clients, 10 a round, "
        "E=5; sageflow: 100 clients, 2-class shards, 20 a round, re-drawn "
        "attackers, deadline with carry-over; crossdevice: 10^6 virtual "
        "mnist5k devices (Dirichlet(0.5) label mix), 100 a round, E=1, the "
        "attackers a fixed share of the population, deadline with carry-over, "
        "f = expected attackers + 2 binomial std (default: %(default)s)",
    )
    p.add_argument("--out", default=None, help="output directory (default runs/robustness-ATTACK)")
    p.add_argument(
        "--attack-param",
        type=parse_kv,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="attack parameter (repeatable), e.g. --attack-param scale=10",
    )
    p.add_argument(
        "--defense-param",
        type=parse_kv,
        action="append",
        default=[],
        metavar="DEFENSE.KEY=VALUE",
        help="a defense parameter over the scenario's preset (repeatable), e.g. "
        "--defense-param siren.variant=paper (Siren's paper rules), "
        "--defense-param median.bucket=2",
    )
    p.add_argument(
        "--set",
        type=parse_kv,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="extra flat config override for every run (repeatable), e.g. --set num_clients=8",
    )
    _run_flags(p)
    return p


def _run_flags(p: OneLineParser) -> None:
    """Where the grid runs (Ray, workers) and whether it records on the ledger."""
    p.add_argument(
        "--ray-address",
        default=None,
        help="run the grid on an existing Ray cluster (default: a local Ray)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="runs in parallel on a pool of Ray actors, one CPU and one torch "
        "thread each (1 = in this process; default: CPU count)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="keep the runs an earlier grid into the same --out finished (a run directory "
        "whose config.yaml is its cell's and whose summary.json is there: a run writes it "
        "last) and run only the others; a grid stopped part-way (a time limit, Ctrl-C, "
        "kill -9) goes on where it was (default: every run again)",
    )
    p.add_argument(
        "--ledger",
        action="store_true",
        help="record every run on FLChain (an embedded devnet per run); audit "
        "afterwards with `python -m ledger.audit OUT`",
    )
    p.add_argument(
        "--ledger-url",
        default=None,
        metavar="URL",
        help="record on this JSON-RPC node instead (implies --ledger; runs go one "
        "at a time: they share the aggregator account)",
    )
    p.add_argument(
        "--committee",
        type=int,
        default=None,
        help="edge validators attesting each recorded round with BLS (default 4; 0 = none)",
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The checked command line (one-line errors, exit 2), with ``defense_params`` ({defense:
    {key: value}} from ``--defense-param``), the scenario's (or quick) rounds, seeds and
    fractions filled in, and ``out`` a Path."""
    from attacks import ATTACKS, make_attack
    from defenses import DEFENSES

    attacks = sorted(set(ATTACKS) - {"none"})
    p = build_parser(attacks, sorted(DEFENSES))
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
    args.defense_params = defense_params(p, args.defense_param, args.defenses)
    args.rounds = QUICK["rounds"] if args.rounds is None and args.quick else args.rounds
    args.seeds = (QUICK["seeds"] if args.quick else 3) if args.seeds is None else args.seeds
    full, quick = FRACTIONS.get(args.scenario, DEFAULT_FRACTIONS)
    args.fractions = args.fractions or (quick if args.quick else full)
    check_ranges(p, args)
    args.fractions = sorted(set(args.fractions))
    check_grid(p, args)
    if args.ledger_url is not None:
        args.ledger, args.workers = True, 1
    args.out = Path(args.out or f"runs/robustness-{args.attack}")
    return args


def check_ranges(p: OneLineParser, args: argparse.Namespace) -> None:
    """Refuse (one line naming the flag and the value, exit 2) a fraction outside [0, 1), a
    count below 1, more than :data:`MAX_ROUNDS` rounds, or a defense (or two fractions that
    name the same run directory, ``f{fraction:g}``) given twice."""
    bad = [f for f in args.fractions if not 0 <= f < 1]
    if bad:
        p.error(f"--fractions: must be in [0, 1), got {bad[0]}")
    for name in ("seeds", "rounds", "workers", "clients_per_round"):
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name.replace('_', '-')}: must be >= 1, got {value}")
    if args.rounds is not None and args.rounds > MAX_ROUNDS:
        p.error(f"--rounds: must be <= {MAX_ROUNDS}, got {args.rounds}")
    if args.committee is not None and not (args.ledger or args.ledger_url):
        p.error("--committee: attests recorded rounds; give --ledger (or --ledger-url) too")
    twice = [d for i, d in enumerate(args.defenses) if d in args.defenses[:i]]
    if twice:
        p.error(f"--defenses: {twice[0]!r} given twice")
    named: dict[str, float] = {}
    for f in sorted(set(args.fractions)):  # an exact repeat is one fraction: kept once
        if f"{f:g}" in named:
            p.error(
                f"--fractions: {named[f'{f:g}']!r} and {f!r} both name the runs f{f:g}; "
                "give fractions that differ in their first 6 significant digits"
            )
        named[f"{f:g}"] = f


def check_grid(p: OneLineParser, args: argparse.Namespace) -> None:
    """Refuse a grid of more than :data:`MAX_RUNS` runs (one line giving the count, exit 2)
    before any of its jobs is built."""
    d, f, s = len(args.defenses), len(args.fractions), args.seeds
    if d * f * s > MAX_RUNS:
        p.error(
            f"--defenses x --fractions x --seeds: {d} x {f} x {s} = {d * f * s} runs; a grid "
            f"may have at most {MAX_RUNS}"
        )


def defense_params(
    p: OneLineParser, pairs: list[tuple[str, object]], defenses: list[str]
) -> dict[str, dict[str, object]]:
    """``--defense-param DEFENSE.KEY=VALUE`` pairs as {defense: {key: value}}, each defense
    built once with them so that a bad one fails before anything starts; a DEFENSE not among
    ``defenses`` (the grid's) or a DEFENSE.KEY given twice is refused too (one line, exit 2).
    Whether they go with the scenario's preset is checked per cell by
    :func:`~benchmarks.robustness_study.core.make_jobs`."""
    from defenses import DEFENSES, make_defense

    params: dict[str, dict[str, object]] = {}
    for key, value in pairs:
        name, dot, param = key.partition(".")
        if not dot or not param or name not in DEFENSES:
            p.error(
                f"--defense-param {key}={value}: expected DEFENSE.KEY=VALUE with DEFENSE "
                f"in {sorted(DEFENSES)}"
            )
        if name not in defenses:
            p.error(f"--defense-param {key}={value}: {name!r} is not in --defenses {defenses}")
        if param in params.get(name, {}):
            p.error(f"--defense-param {key}: given twice ({params[name][param]} and {value})")
        params.setdefault(name, {})[param] = value
    for name, given in params.items():
        try:
            make_defense(name, **given)
        except ValueError as e:
            p.error(f"--defense-param: {e}")
    return params
