"""Command line of ``benchmarks/scheduler.py`` (every flag explained in ``--help``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from benchmarks.scheduler_study import live as live_mod
from simulator.cli import OneLineParser, parse_kv
from simulator.run.runlock import make_out_dir, writable_file

PARTS = ("instances", "predictor", "live")
#: the live part's placements: greedy, ga and the default placement (lpt), whichever the mode
LIVE = {
    mode: list(dict.fromkeys(["greedy", "ga", live_mod.default_label()]))
    for mode in ("full", "quick")
}
PREDICTOR = {"full": ["greedy", "lpt", "ga", "ga_linear"], "quick": ["greedy", "ga"]}
REPEATS = {"full": 2, "quick": 2}
GA_SECONDS = {"full": (10.0, 60.0), "quick": (1.0, 10.0)}


def build_parser() -> OneLineParser:
    """The parser of every flag (checked further by :func:`parse_args`); the small-size knobs
    (tests, exploration) are hidden from ``--help``."""
    p = OneLineParser(
        description="Scheduler benchmark (issue 11): placement search on standard "
        "instances, chunk-time prediction"
    )
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument(
        "--quick",
        action="store_true",
        help="under 5 minutes: GA 1 s per class and 10 s on the large instance, fewer rounds",
    )
    p.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"comma-separated parts to run (default all): {','.join(PARTS)}",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the instances and of every run (default 0)"
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("runs/scheduler"),
        help="output directory (default: runs/scheduler)",
    )
    p.add_argument(
        "--placement-param",
        action="append",
        default=[],
        type=parse_kv,
        metavar="KEY=VALUE",
        help="ga parameter (generations, population, "
        "etc_generations, chunking) for the ga runs and the regret; repeatable",
    )
    p.add_argument(
        "--placements",
        default=None,
        metavar="LABEL,...",
        help="the live part's placements, comma-separated: a placement's name, or "
        "NAME_PREDICTOR with another chunk-time predictor (lpt_gbdt, ga_prior); "
        f"default {','.join(LIVE['full'])}",
    )
    p.add_argument(
        "--actor-kinds",
        action="append",
        default=[],
        type=parse_kv,
        metavar="NAME=SPEC",
        help="a heterogeneous pool instead of 2 CPU actors, "
        "as FedSentry's --actor-kinds (repeatable)",
    )
    p.add_argument(
        "--num-actors",
        type=int,
        default=None,
        help="CPU actors (default 2; not with --actor-kinds)",
    )
    p.add_argument(
        "--backend",
        choices=("ray", "local"),
        default="ray",
        help="ray (default) or local (in-process workers, one after another)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        type=parse_kv,
        metavar="FIELD=VALUE",
        help="any other FedSentry config field of every run (repeatable; not the fields "
        "the study sets itself or that have their own flag: "
        f"{', '.join(sorted(STUDY_FIELDS))})",
    )
    p.add_argument("--no-plots", action="store_true", help="skip the PNG")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _hidden_flags(p)
    return p


#: config fields the study sets (each arm's placement, the runs' place, seed and length) or that
#: have a flag of their own: ``--set`` refuses them (one was silently overridden, or won over
#: its flag)
STUDY_FIELDS = {
    "backend": "--backend",
    "num_actors": "--num-actors",
    "actor_kinds": "--actor-kinds",
    "clients_per_round": "",
    "num_clients": "",
    "placement": "--placements",
    "placement_params": "--placement-param (ga) or --placements NAME_PREDICTOR",
    "out": "--out",
    "seed": "--seed",
    "rounds": "",
    "eval_every": "",
}


def _hidden_flags(p: OneLineParser) -> None:
    """The small-size knobs (tests, exploration), not in ``--help``."""
    hide = argparse.SUPPRESS
    p.add_argument("--rounds", type=int, default=None, help=hide)
    p.add_argument("--clients-per-round", type=int, default=None, help=hide)
    p.add_argument("--num-clients", type=int, default=None, help=hide)
    p.add_argument("--repeats", type=int, default=None, help=hide)
    p.add_argument("--tasks", default=",".join(live_mod.TASKS), help=hide)
    p.add_argument("--instances-classes", type=int, default=None, help=hide)
    p.add_argument("--ga-seconds", type=float, default=None, help=hide)
    p.add_argument("--large-seconds", type=float, default=None, help=hide)
    p.add_argument("--no-large", action="store_true", help=hide)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The checked command line (one-line errors, exit 2): ``mode`` (full / quick), ``parts``,
    ``tasks`` and ``live`` (the live placements) as lists, ``ga_params`` and ``extra`` (config
    fields of every run), each task's config built once so that a bad one fails here."""
    p = build_parser()
    a = p.parse_args(argv)
    a.mode = "quick" if a.quick else "full"
    a.parts = [s.strip() for s in a.parts.split(",") if s.strip()]
    a.tasks = [s.strip() for s in a.tasks.split(",") if s.strip()]
    a.live = (
        [s.strip() for s in a.placements.split(",") if s.strip()]
        if a.placements is not None
        else LIVE[a.mode]
    )
    for label in a.live or ["(none)"]:
        try:
            live_mod.label_spec(label)
        except ValueError as e:
            p.error(f"--placements: {e}")
    for name, given, valid in (("parts", a.parts, PARTS), ("tasks", a.tasks, live_mod.TASKS)):
        bad = [x for x in given if x not in valid] or ([] if given else ["(none)"])
        if bad:
            p.error(f"--{name}: unknown {bad[0]!r}; valid: {','.join(valid)}")
    for name, low in (
        ("rounds", 2),
        ("clients_per_round", 1),
        ("num_clients", 1),
        ("repeats", 1),
        ("instances_classes", 1),
        ("num_actors", 1),
    ):
        v = getattr(a, name)
        if v is not None and v < low:
            p.error(f"--{name.replace('_', '-')}: must be >= {low}, got {v}")
    for name in ("ga_seconds", "large_seconds"):
        v = getattr(a, name)
        if v is not None and not v >= 0:
            p.error(f"--{name.replace('_', '-')}: must be >= 0, got {v}")
    from simulator.config.fields import ConfigError
    from simulator.config.sections import build_config

    for key, _ in a.set:
        if key in STUDY_FIELDS:
            own = STUDY_FIELDS[key]
            p.error(f"--set {key}: the study sets it" + (f" (use {own})" if own else ""))
    if a.actor_kinds and a.num_actors is not None:
        p.error("--num-actors: conflicts with --actor-kinds (the kinds' counts size the pool)")
    a.ga_params = dict(a.placement_param)
    if "predictor" in a.ga_params:  # the live arms name theirs: ga_gbdt, ga_prior, ...
        p.error("--placement-param predictor: give it in --placements (e.g. ga_gbdt)")
    try:  # the simulator's own check of the ga's parameters (types, ranges)
        build_config(flat={"placement": "ga", "placement_params": a.ga_params})
    except ConfigError as e:
        why = str(e).splitlines()[0].removeprefix("execution.placement_params: ")
        p.error(f"--placement-param: {why}")
    a.extra = run_fields(a)

    for task in a.tasks:  # a bad field or actor kind fails here, before any part starts
        try:
            build_config(flat=live_mod.task_config(task, 2, a.seed, a.extra))
        except ConfigError as e:
            p.error(str(e).splitlines()[0])
    try:  # where the results go, checked before any part starts
        if a.json is not None:
            writable_file(a.json, "--json")
        make_out_dir(a.out, "--out")
    except ValueError as e:
        p.error(str(e))
    return a


def run_fields(a: argparse.Namespace) -> dict[str, Any]:
    """Config fields of every run: the backend, ``--set``, the actor kinds (or the number of CPU
    actors) and the hidden size knobs."""
    extra = {"backend": a.backend, **dict(a.set)}
    if a.actor_kinds:
        extra["actor_kinds"] = dict(a.actor_kinds)
    else:
        extra["num_actors"] = 2 if a.num_actors is None else a.num_actors
    for key, arg in (("clients_per_round", a.clients_per_round), ("num_clients", a.num_clients)):
        if arg is not None:
            extra[key] = arg
    return extra
