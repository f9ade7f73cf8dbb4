"""Scheduler benchmark (issue 11): placement search on standard instances, chunk-time prediction
on FedSentry's own chunks, and live rounds under each placement.

Parts (``--parts``, comma-separated; default all three):

* ``instances``: Braun et al.'s 12 ETC classes at 512 tasks x 16 machines and a 10,000 x 64
  instance; every method's makespan beside the LP lower bound, and its run time
  (:mod:`benchmarks.scheduler_instances`; GA 10 s per class, 60 s on the large one; ``--quick``:
  1 s and 10 s).
* ``predictor``: GBDT and Parrot's linear fit trained on the chunks of the first ~70% of the
  recorded runs' rounds, MAPE on the rest; decision regret of ``ga`` placing held-out rounds with
  the learned cost, judged by an oracle fitted on all chunks, since the true time of a schedule
  that never ran is unknown (:mod:`benchmarks.scheduler_predictor`).
* ``live``: 200 quantity-skewed clients a round (virtual clients, log-normal sizes, median 20
  samples) of the mnist5k CNN and of the digits MLP on 2 Ray actors, every round trained on the
  actors; per placement the training wall time of rounds 1.. (round 0 calibrates the predictor),
  placements interleaved in repeats on one federation and actor pool per task
  (:mod:`benchmarks.scheduler_live`); ``--placements`` picks them (default greedy, ga and the
  default placement, lpt, marked ``*``). Checks: ga <= 1.02 x greedy on both tasks, <= 0.80 x on
  cnn; the default placement <= 1.02 x greedy on both tasks.

The predictor reuses the live runs' chunks and adds a ``ga`` run with the linear predictor
(``--quick``: the live runs only). Writes ``--json`` (exactly ``{"instances": [...],
"predictor": {...}, "live": [...]}``; a part not run is empty) and, in ``--out``:
``results.json``, ``settings.json`` (settings, checks, wall time), ``live.csv``,
``instances.csv``, ``scheduler.png`` and every run's ``events/<task>-<label>-r<repeat>.jsonl``.

Usage::

    python benchmarks/scheduler.py --json s.json              # about 12 minutes on 2 cores
    python benchmarks/scheduler.py --quick --json q.json      # about 2.5 minutes
    python benchmarks/scheduler.py --parts live --actor-kinds gpu=device=gpu,gpus=0.5 \\
        --actor-kinds cpu=count=1
"""

from __future__ import annotations

import csv
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import scheduler_live as live_mod  # noqa: E402
from benchmarks.scheduler_instances import instance_checks  # noqa: E402
from benchmarks.scheduler_predictor import predictor_checks  # noqa: E402
from simulator.cli import OneLineParser, parse_kv  # noqa: E402

PARTS = ("instances", "predictor", "live")
#: the live part's placements: greedy, ga and the default placement (lpt), whichever the mode
LIVE = {mode: list(dict.fromkeys(["greedy", "ga", live_mod.default_label()]))
        for mode in ("full", "quick")}
PREDICTOR = {"full": ["greedy", "lpt", "ga", "ga_linear"], "quick": ["greedy", "ga"]}
REPEATS = {"full": 2, "quick": 2}
GA_SECONDS = {"full": (10.0, 60.0), "quick": (1.0, 10.0)}


def parse_args(argv: list[str] | None) -> Any:
    """The command line (one-line errors, exit 2)."""
    import argparse

    from simulator.placement import make_placement

    p = OneLineParser(description=__doc__.split("\n")[0])
    hide = argparse.SUPPRESS
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--quick", action="store_true",
                   help="under 5 minutes: GA 1 s per class and 10 s on the large instance, "
                        "fewer rounds")
    p.add_argument("--parts", default=",".join(PARTS),
                   help=f"comma-separated parts to run (default all): {','.join(PARTS)}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("runs/scheduler"), help="output directory")
    p.add_argument("--placement-param", action="append", default=[], type=parse_kv,
                   metavar="KEY=VALUE", help="ga parameter (generations, population, "
                   "etc_generations, chunking) for the ga runs and the regret; repeatable")
    p.add_argument("--placements", default=None, metavar="LABEL,...",
                   help="the live part's placements, comma-separated: a placement's name, or "
                   "NAME_PREDICTOR with another chunk-time predictor (lpt_gbdt, ga_prior); "
                   f"default {','.join(LIVE['full'])}")
    p.add_argument("--actor-kinds", action="append", default=[], type=parse_kv,
                   metavar="NAME=SPEC", help="a heterogeneous pool instead of 2 CPU actors, "
                   "as FedSentry's --actor-kinds (repeatable)")
    p.add_argument("--num-actors", type=int, default=2, help="CPU actors (default 2)")
    p.add_argument("--backend", choices=("ray", "local"), default="ray",
                   help="ray (default) or local (in-process workers, one after another)")
    p.add_argument("--set", action="append", default=[], type=parse_kv, metavar="FIELD=VALUE",
                   help="any other FedSentry config field of every run (repeatable)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    # small-size knobs (tests, exploration)
    p.add_argument("--rounds", type=int, default=None, help=hide)
    p.add_argument("--clients-per-round", type=int, default=None, help=hide)
    p.add_argument("--num-clients", type=int, default=None, help=hide)
    p.add_argument("--repeats", type=int, default=None, help=hide)
    p.add_argument("--tasks", default=",".join(live_mod.TASKS), help=hide)
    p.add_argument("--instances-classes", type=int, default=None, help=hide)
    p.add_argument("--ga-seconds", type=float, default=None, help=hide)
    p.add_argument("--large-seconds", type=float, default=None, help=hide)
    p.add_argument("--no-large", action="store_true", help=hide)
    a = p.parse_args(argv)
    a.mode = "quick" if a.quick else "full"
    a.parts = [s.strip() for s in a.parts.split(",") if s.strip()]
    a.tasks = [s.strip() for s in a.tasks.split(",") if s.strip()]
    a.live = ([s.strip() for s in a.placements.split(",") if s.strip()]
              if a.placements is not None else LIVE[a.mode])
    for label in a.live or ["(none)"]:
        try:
            live_mod.label_spec(label)
        except ValueError as e:
            p.error(f"--placements: {e}")
    for name, given, valid in (("parts", a.parts, PARTS), ("tasks", a.tasks, live_mod.TASKS)):
        bad = [x for x in given if x not in valid] or ([] if given else ["(none)"])
        if bad:
            p.error(f"--{name}: unknown {bad[0]!r}; valid: {','.join(valid)}")
    for name, low in (("rounds", 2), ("clients_per_round", 1), ("num_clients", 1),
                      ("repeats", 1), ("instances_classes", 1), ("num_actors", 1)):
        v = getattr(a, name)
        if v is not None and v < low:
            p.error(f"--{name.replace('_', '-')}: must be >= {low}, got {v}")
    for name in ("ga_seconds", "large_seconds"):
        v = getattr(a, name)
        if v is not None and not v >= 0:
            p.error(f"--{name.replace('_', '-')}: must be >= 0, got {v}")
    a.ga_params = dict(a.placement_param)
    try:
        make_placement("ga", **a.ga_params)
    except (TypeError, ValueError) as e:
        p.error(f"--placement-param: {e}")
    a.extra = {"backend": a.backend, **dict(a.set)}
    if a.actor_kinds:
        a.extra["actor_kinds"] = dict(a.actor_kinds)
    else:
        a.extra["num_actors"] = a.num_actors
    for key, arg in (("clients_per_round", a.clients_per_round),
                     ("num_clients", a.num_clients)):
        if arg is not None:
            a.extra[key] = arg
    from simulator.config.sections import ConfigError, build_config

    for task in a.tasks:   # a bad field or actor kind fails here, before any part starts
        try:
            build_config(flat=live_mod.task_config(task, 2, a.seed, a.extra))
        except ConfigError as e:
            p.error(str(e).splitlines()[0])
    return a


def instances_part(a: Any) -> tuple[list[dict[str, Any]], str]:
    """The standard-instance records and a note on the GA budget used."""
    from benchmarks.scheduler_instances import measure, table
    from simulator.scheduler.instances import large_instance, standard_instances

    small, large = GA_SECONDS[a.mode]
    small = a.ga_seconds if a.ga_seconds is not None else small
    large = a.large_seconds if a.large_seconds is not None else large
    classes = standard_instances(a.seed)
    names = list(classes)[:a.instances_classes] if a.instances_classes else list(classes)
    records = [measure(n, classes[n], small, a.seed) for n in names]
    if not a.no_large:
        records.append(measure("large_i_hihi", large_instance(seed=a.seed), large, a.seed))
    note = (f"instances: {len(names)} of 12 Braun classes, GA {small:g} s each; "
            + ("10,000 x 64 skipped" if a.no_large else f"10,000 x 64 with GA {large:g} s")
            + ("" if (small, large, len(names), a.no_large) == (10.0, 60.0, 12, False)
               else " (full: 12 classes x 10 s, 60 s on 10,000 x 64)"))
    print(table(records))
    print(note)
    return records, note


def run_plan(a: Any) -> list[tuple[str, int]]:
    """(label, repeat) of every run of a task, in execution order: the live placements
    interleaved repeat after repeat, then the predictor's other placements once."""
    plan: list[tuple[str, int]] = []
    if "live" in a.parts:
        reps = a.repeats or REPEATS[a.mode]
        plan = [(lab, r) for r in range(reps) for lab in a.live]
    if "predictor" in a.parts:
        plan += [(lab, 0) for lab in PREDICTOR[a.mode] if lab not in {x for x, _ in plan}]
    return plan


def recorded(a: Any) -> tuple[list[live_mod.Run], list[live_mod.TaskSetup]]:
    """Every task's runs (see :func:`run_plan`)."""
    from tqdm import tqdm

    plan = run_plan(a)
    bar = tqdm(total=len(plan) * len(a.tasks), desc="scheduler", unit="run",
               disable=a.no_progress)
    runs, setups = [], []
    try:
        for task in a.tasks:
            rounds = a.rounds or live_mod.ROUNDS[a.mode][task]
            r, s = live_mod.record(task, plan, rounds, a.seed, a.extra, a.ga_params, a.out, bar)
            runs += r
            setups.append(s)
    finally:
        bar.close()
    return runs, setups


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    """Flat rows (nested values as JSON) to ``path``."""
    if not rows:
        return
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: json.dumps(v) if isinstance(v, dict | list) else v
                        for k, v in r.items()})


def _shown(lines: list[str]) -> list[str]:
    """Print ``lines`` (check results) and return them."""
    print("\n".join(lines))
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run the parts; print their tables and checks; write the outputs. Returns the exit code."""
    a = parse_args(argv)
    from simulator.config.sections import ConfigError

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
                from benchmarks import scheduler_predictor as pred

                doc["predictor"], points = pred.evaluate(runs, setups, a.ga_params)
                print(pred.table(doc["predictor"]))
                lines += _shown(predictor_checks(doc["predictor"]))
    except (ConfigError, ValueError) as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    text = json.dumps(doc, indent=2)
    (a.out / "results.json").write_text(text)
    if a.json is not None:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(text)
    write_csv(doc["live"], a.out / "live.csv")
    write_csv(doc["instances"], a.out / "instances.csv")
    settings = {"mode": a.mode, "parts": a.parts, "tasks": a.tasks, "seed": a.seed,
                "extra": a.extra, "ga_params": a.ga_params, "plan": run_plan(a),
                "checks": lines, "notes": notes, "wall_seconds": time.perf_counter() - t0}
    (a.out / "settings.json").write_text(json.dumps(settings, indent=2, default=str))
    if not a.no_plots:
        from benchmarks.scheduler_plot import plot

        plot(doc["live"], points, a.out / "scheduler.png")
    print(f"done in {time.perf_counter() - t0:.0f} s; results in {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
