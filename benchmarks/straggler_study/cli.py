"""Command line of ``benchmarks/stragglers.py`` (every flag explained in ``--help``)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from benchmarks.straggler_study.policy_flags import policies_run, policy_params
from simulator.cli import OneLineParser, parse_kv
from simulator.run.runlock import writable_file

POLICIES = (
    "wait_for_all",
    "deadline",
    "deadline_carryover",
    "first_k",
    "overcommit",
    "fedbuff",
    "fedasync",
)
#: ``--quick``: 37 CPU-s on one torch thread (two threads, loaded: 340 CPU-s, 13 min)
QUICK = {"population": 20_000, "virtual_hours": 0.25, "seeds": 1, "clients_per_round": 50}
#: the defaults of the flags ``--quick`` presets (None in argparse: given in any spelling, they win)
DEFAULTS = {"population": 100_000, "virtual_hours": 0.5, "seeds": 2, "clients_per_round": 100}
#: the most rounds / server steps a run may ask for: far beyond any study (the virtual-time
#: budget ends runs long before), and well inside what the engine's counters and progress bar
#: hold (``--rounds 10**20`` ended in an OverflowError traceback)
MAX_ROUNDS = 10**9
#: the most runs a study may have: each keeps its events in memory until the study's tables,
#: and a run takes seconds at the least, so 10**5 of them are days of work (the default study
#: has 14); ``--seeds 99999999999999`` is refused before anything runs
MAX_RUNS = 100_000
#: runs per seed of the fidelity cases of :mod:`benchmarks.straggler_study.scenarios` that do
#: not run the study's grid (``fedbuff`` runs it with its 2 policies)
SCENARIO_CELLS = {"sageflow": 3, "fedprox": 2}


def build_parser() -> OneLineParser:
    """The parser of every flag (checked further by :func:`parse_args`)."""
    from simulator.policies import policy_names

    p = OneLineParser(
        description="Straggler study: every round policy on the same device "
        "population and virtual-time budget; time-to-accuracy, stale "
        "and wasted work, participation fairness, slow vs fast "
        "devices."
    )
    p.add_argument(
        "--policies",
        nargs="+",
        default=list(POLICIES),
        metavar="POLICY",
        help=f"round policies to compare (default: all): {policy_names()}",
    )
    p.add_argument(
        "--population",
        type=int,
        default=None,
        help="devices in the population (virtual clients; default 100000)",
    )
    p.add_argument(
        "--clients-per-round",
        type=int,
        default=None,
        help="cohort K of synchronous rounds (overcommit starts ceil(1.3 K)); "
        "fedbuff keeps K clients in flight and steps every K/10 arrivals, "
        "fedasync keeps K/5 in flight (default 100)",
    )
    p.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 per policy (default 2)")
    p.add_argument(
        "--virtual-hours",
        type=float,
        default=None,
        help="virtual-time budget of every run, hours (default 0.5)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=100_000,
        help="cap on rounds / server steps per run (default: the time budget ends runs first)",
    )
    p.add_argument(
        "--deadline-quantile",
        type=float,
        default=0.7,
        help="deadline policies: the deadline is this quantile of the devices' "
        "update durations (default 0.7: ~30%% stragglers)",
    )
    p.add_argument(
        "--policy-param",
        action="append",
        default=[],
        type=parse_kv,
        metavar="POLICY:KEY=VALUE",
        help="override a policy parameter, e.g. fedbuff:k=20 (repeatable)",
    )
    p.add_argument(
        "--attack", default="none", help="attack among the devices (e.g. labelflip; default none)"
    )
    p.add_argument(
        "--attack-fractions",
        type=float,
        nargs="+",
        default=[0.0],
        help="malicious fractions (with --attack; default 0)",
    )
    p.add_argument(
        "--defense",
        default="fedavg",
        help="aggregation rule / defense (default fedavg; sageflow handles stale rows)",
    )
    p.add_argument(
        "--availability-trace",
        default=None,
        metavar="FILE",
        help="CSV/JSON of per-device online intervals (default: diurnal model)",
    )
    p.add_argument(
        "--speed-label-skew",
        type=float,
        default=0.0,
        metavar="S",
        help="devices whose data is mostly the lower half of the classes compute "
        "exp(S) times slower (speed correlated with data; default 0 = "
        "independent); the slow/fast quartile accuracies then show whether "
        "slow devices' data is underrepresented",
    )
    p.add_argument(
        "--no-dropout",
        action="store_true",
        help="devices going offline keep their update (default: it is lost)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        type=parse_kv,
        metavar="FIELD=VALUE",
        help="any other FedSentry config field for every run (repeatable), e.g. dataset=mnist5k",
    )
    p.add_argument(
        "--scenario",
        choices=("study", "sageflow", "fedprox", "fedbuff"),
        default="study",
        help="study (default), or a fidelity case of a seed paper",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a small study on one torch thread, well under a minute (about 40 CPU-s; 80 s "
        f"on 2 cores loaded by other jobs); the flags not given: {QUICK}",
    )
    _output_flags(p)
    return p


def _output_flags(p: OneLineParser) -> None:
    """Where the runs train (backend, Ray cluster, actors) and what the study writes."""
    p.add_argument(
        "--backend",
        choices=("local", "ray"),
        default=None,
        help="local (in-process, default) or ray (default when --ray-address)",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        metavar="HOST:PORT",
        help="run the actors on an existing Ray cluster",
    )
    p.add_argument("--num-actors", type=int, default=None, help="Ray actors (default: cores)")
    p.add_argument(
        "--inline",
        choices=("auto", "always", "never"),
        default="auto",
        help="train small rounds in the driver (auto) or always on the actors (never)",
    )
    p.add_argument("--out", default="runs/stragglers", help="output dir (default: %(default)s)")
    p.add_argument("--json", default=None, metavar="FILE", help="also write results.json here")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--resume",
        action="store_true",
        help="keep the runs an earlier study into the same --out finished (a run directory "
        "whose cell.json, written last, names the same config, --speed-label-skew and trace "
        "files' contents) and run only the others; a "
        "study stopped part-way (a time limit, Ctrl-C, kill -9) goes on where it was",
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The checked command line (one-line errors, exit 2); ``--quick`` fills in :data:`QUICK`
    for the flags not given; ``policy_params`` and ``extra`` are the parsed ``--policy-param``
    and ``--set``."""
    from simulator.policies import policy_names

    p = build_parser()
    a = p.parse_args(argv)
    for k, v in (QUICK if a.quick else DEFAULTS).items():
        if getattr(a, k) is None:  # not given, in whatever spelling
            setattr(a, k, v)
    unknown = sorted(set(a.policies) - set(policy_names()))
    if unknown:
        p.error(f"--policies: unknown round policy {unknown[0]!r}; valid: {policy_names()}")
    for name, low in (("population", 1), ("clients_per_round", 1), ("seeds", 1), ("rounds", 1)):
        if getattr(a, name) < low:
            p.error(f"--{name.replace('_', '-')}: must be >= {low}, got {getattr(a, name)}")
    if not a.virtual_hours > 0:
        p.error(f"--virtual-hours: must be > 0, got {a.virtual_hours}")
    if not (a.speed_label_skew >= 0 and math.isfinite(a.speed_label_skew)):
        p.error(f"--speed-label-skew: must be a finite number >= 0, got {a.speed_label_skew}")
    if not 0 < a.deadline_quantile < 1:
        p.error(f"--deadline-quantile: must be in (0, 1), got {a.deadline_quantile}")
    check_grid(p, a)
    if a.json:  # before the study's minutes, not after them
        try:
            writable_file(Path(a.json), "--json")
        except ValueError as e:
            p.error(str(e))
    a.policy_params = policy_params(p, a.policy_param, a.clients_per_round, policies_run(a))
    a.extra = dict(a.set)
    if "seed" in a.extra:
        p.error(f"--set seed={a.extra['seed']}: the study runs seeds 0..N-1; give --seeds N")
    return a


def planned_runs(a: argparse.Namespace) -> tuple[int, str]:
    """The number of runs the study or its ``--scenario`` makes, and how, e.g. ``"--policies x
    --seeds x --attack-fractions: 7 x 2 x 1"``."""
    if a.scenario in SCENARIO_CELLS:
        k = SCENARIO_CELLS[a.scenario]
        return k * a.seeds, f"--seeds: {k} runs of --scenario {a.scenario} x {a.seeds}"
    k, f = (2 if a.scenario == "fedbuff" else len(a.policies)), len(a.attack_fractions)
    return k * a.seeds * f, f"--policies x --seeds x --attack-fractions: {k} x {a.seeds} x {f}"


def check_grid(p: OneLineParser, a: argparse.Namespace) -> None:
    """Refuse (one line naming the flag, exit 2) a policy or an attack fraction given twice (or
    two fractions naming the same runs, ``f{fraction:g}``), a fraction outside [0, 1), one > 0
    without a known ``--attack``, more than :data:`MAX_ROUNDS` rounds or :data:`MAX_RUNS` runs."""
    from attacks import ATTACKS

    twice = [x for i, x in enumerate(a.policies) if x in a.policies[:i]]
    if twice:
        p.error(f"--policies: {twice[0]!r} given twice")
    bad = [f for f in a.attack_fractions if not 0 <= f < 1]
    if bad:
        p.error(f"--attack-fractions: must be in [0, 1), got {bad[0]}")
    for i, f in enumerate(a.attack_fractions):
        same = [g for g in a.attack_fractions[:i] if f"{g:g}" == f"{f:g}"]
        if same and same[0] == f:
            p.error(f"--attack-fractions: {f!r} given twice")
        if same:
            p.error(
                f"--attack-fractions: {same[0]!r} and {f!r} both name the runs f{f:g}; give "
                "fractions that differ in their first 6 significant digits"
            )
    if a.attack not in ATTACKS:
        p.error(f"--attack: unknown attack {a.attack!r}; valid: {sorted(ATTACKS)}")
    if a.attack == "none" and max(a.attack_fractions) > 0:
        p.error(
            f"--attack-fractions: {max(a.attack_fractions)} > 0 needs an --attack "
            "(e.g. --attack labelflip)"
        )
    if a.rounds > MAX_ROUNDS:
        p.error(f"--rounds: must be <= {MAX_ROUNDS}, got {a.rounds}")
    n, grid = planned_runs(a)
    if n > MAX_RUNS:
        p.error(f"{grid} = {n} runs; a study may have at most {MAX_RUNS}")
