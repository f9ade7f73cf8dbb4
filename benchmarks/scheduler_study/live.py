"""Live rounds of ``benchmarks/scheduler.py``: the two workloads, the recorded runs, the summary.

A *run* is one FedSentry simulation of a task under one placement; every run of a task shares the
task's federation and Ray actor pool (:func:`record`), so runs differ only in the placement (and
in the machine's noise). Placements are run interleaved in repeats (greedy, ga, lpt, greedy, ga,
lpt, ...) so that a slow spell of the shared machine falls on all of them alike. Each run keeps
its round events; :func:`summarize` turns them into the ``live`` records and the predictor part
(:mod:`benchmarks.scheduler_study.predictor`) reads their chunks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.stops import write_text

#: the workloads: quantity-skewed virtual clients (log-normal sizes, median 20 samples)
TASKS: dict[str, dict[str, Any]] = {
    "cnn": {"dataset": "mnist5k", "model": "cnn"},
    "mlp": {"dataset": "digits", "model": "mlp"},
}
COMMON = {
    "partition": "virtual",
    "virtual_size_median": 20,
    "virtual_size_sigma": 1.0,
    "num_clients": 2000,
    "clients_per_round": 200,
    "local_epochs": 1,
    "inline": "never",
    "progress": False,
    "plots": False,
}
#: rounds per run (round 0 is the predictor's calibration; the live figures use rounds 1..)
ROUNDS = {"full": {"cnn": 6, "mlp": 20}, "quick": {"cnn": 2, "mlp": 6}}


def label_spec(label: str) -> tuple[str, dict[str, Any]]:
    """The placement and parameters of run label ``label``: a placement's name (with its own
    default predictor; greedy also logs its predicted makespan, which does not change its
    groups), or ``NAME_PREDICTOR`` for another chunk-time predictor (``lpt_gbdt``,
    ``ga_linear``). ValueError on anything else."""
    from simulator.placement import PLACEMENTS
    from simulator.scheduler.chunking import COST_MODELS

    if label in PLACEMENTS:
        return label, ({"predict": True} if label == "greedy" else {})
    name, _, predictor = label.rpartition("_")
    if name in PLACEMENTS and PLACEMENTS[name].uses_cost and predictor in COST_MODELS:
        return name, {"predictor": predictor}
    valid = sorted(PLACEMENTS) + ["NAME_" + "|".join(COST_MODELS)]
    raise ValueError(f"unknown placement label {label!r}; valid: {', '.join(valid)}")


def default_label() -> str:
    """The label of FedSentry's default placement (its name)."""
    from simulator.config.system import ExecutionConfig

    return ExecutionConfig().placement


def default_note() -> str:
    """What the table's ``*`` marks."""
    from simulator.placement import predictor_of

    name = default_label()
    return f"* the default placement ({name}, predictor {predictor_of(name, {})})"


@dataclass
class Run:
    """One recorded simulation: its task, label, repeat and round events."""

    task: str
    label: str
    repeat: int
    events: list[dict[str, Any]]
    #: round -> (selected client ids, their local samples) as the plan built the tasks
    sizes: dict[int, tuple[list[int], list[int]]] = field(default_factory=dict)


@dataclass
class TaskSetup:
    """What the predictor part needs of a task besides its runs."""

    task: str
    flops: float
    batch_size: int
    epochs: int
    kinds: list[str]
    seed: int


def task_config(task: str, rounds: int, seed: int, extra: dict[str, Any]) -> dict[str, Any]:
    """The flat config of ``task``'s runs (evaluation only after the last round)."""
    return {**COMMON, **TASKS[task], "rounds": rounds, "eval_every": rounds, "seed": seed, **extra}


def run_once(flat: dict[str, Any], fed: Any, pool: Any, out: Path | None) -> Run:
    """One simulation on the shared federation and pool; its events (without verdicts)."""
    from simulator.config.sections import build_config
    from simulator.round.engine import Simulation

    cfg = build_config(flat=flat)
    sim = Simulation(cfg, federation=fed, executor=pool)
    events: list[dict[str, Any]] = []
    try:
        sim.run(
            on_record=lambda rec: events.append(
                {k: v for k, v in rec.to_event().items() if k != "verdicts"}
            )
        )
    finally:
        sim.close()
    run = Run("", "", 0, events)
    for ev in events:
        ids = [int(c) for c in ev["selected"]]
        run.sizes[int(ev["round"])] = (ids, fed.clients.sizes(np.array(ids, np.int64)).tolist())
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text(out, "".join(json.dumps(e, default=float) + "\n" for e in events))
    return run


def record(
    task: str,
    plan: list[tuple[str, int]],
    rounds: int,
    seed: int,
    extra: dict[str, Any],
    params: dict[str, Any],
    out: Path | None,
    bar: Any,
) -> tuple[list[Run], TaskSetup]:
    """Record ``task``'s runs in the order of ``plan`` ((label, repeat) pairs) on one federation
    and one actor pool.

    ``extra``: config fields for every run (``--set``, backend, actor kinds); ``params``: the
    ``ga`` parameters (``--placement-param``), merged into the ``ga`` labels'.
    """
    from simulator.config.sections import build_config
    from simulator.run.budget import check_budget
    from simulator.run.executor import make_executor
    from simulator.run.federation import build_federation

    base = task_config(task, rounds, seed, extra)
    cfg0 = build_config(flat=dict(base, out=str(out or "runs/scheduler")))
    check_budget(cfg0)  # a run that cannot fit stops here, before anything starts
    fed = build_federation(cfg0)
    pool = make_executor(cfg0, fed)
    runs: list[Run] = []
    try:
        kinds = list(pool.kinds())
        for label, rep in plan:
            name, own = label_spec(label)
            flat = dict(
                base,
                placement=name,
                placement_params={**own, **(params if name == "ga" else {})},
                out=str(out or "runs/scheduler"),
            )
            bar.set_postfix_str(f"{task} {label} #{rep}")
            path = out / "events" / f"{task}-{label}-r{rep}.jsonl" if out else None
            run = run_once(flat, fed, pool, path)
            run.task, run.label, run.repeat = task, label, rep
            runs.append(run)
            bar.update(1)
    finally:
        pool.shutdown()
    setup = TaskSetup(
        task,
        float(fed.model_spec.train_flops_per_sample()),
        int(cfg0.algorithm.batch_size),
        int(cfg0.algorithm.local_epochs),
        kinds,
        seed,
    )
    return runs, setup


def round_seconds(ev: dict[str, Any]) -> float:
    """A round's training wall time: the last actor's answer (``finished``, seconds from
    submitting the round) when the pool tags chunks with it, else the slowest worker's own
    training time (``slowest_train_seconds``)."""
    fin = [float(c["finished"]) for c in ev.get("chunks") or [] if "finished" in c]
    return max(fin) if fin else float(ev["slowest_train_seconds"])


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def summarize(runs: list[Run], labels: list[str]) -> list[dict[str, Any]]:
    """One ``live`` record per task and label: means over every repeat's rounds 1.. of the
    round's training wall time (``round_s``, its std ``round_s_std``), the placement's own time
    and its predicted and measured makespans; ``ratio_to_greedy`` = round_s / greedy's."""
    out: list[dict[str, Any]] = []
    for task in dict.fromkeys(r.task for r in runs):
        recs: dict[str, dict[str, Any]] = {}
        for label in labels:
            evs = [
                e
                for r in runs
                if r.task == task and r.label == label
                for e in r.events
                if int(e["round"]) >= 1
            ]
            if not evs:
                continue
            secs = [round_seconds(e) for e in evs]
            pl = [e["placement"] for e in evs if e.get("placement")]
            recs[label] = {
                "task": task,
                "placement": label,
                "round_s": float(np.mean(secs)),
                "round_s_std": float(np.std(secs)),
                "rounds": len(secs),
                "repeats": len({r.repeat for r in runs if r.task == task and r.label == label}),
                "placement_s": _mean([float(p["placement_s"]) for p in pl]),
                "predicted_s": _mean(
                    [float(p["predicted_s"]) for p in pl if p.get("predicted_s") is not None]
                ),
                "measured_s": _mean([float(p["measured_s"]) for p in pl]),
            }
        ref = recs.get("greedy")
        for rec in recs.values():
            rec["ratio_to_greedy"] = (
                rec["round_s"] / ref["round_s"] if ref and ref["round_s"] > 0 else None
            )
            out.append(rec)
    return out


def checks(live: list[dict[str, Any]]) -> list[str]:
    """The acceptance lines: ga <= 1.02 x greedy on every task, ga <= 0.80 x greedy on cnn, and
    the default placement (unless it is greedy) <= 1.02 x greedy on every task."""
    lines = []
    default = default_label()
    for rec in live:
        if rec["ratio_to_greedy"] is None:
            continue
        r, task = rec["ratio_to_greedy"], rec["task"]
        if rec["placement"] == default != "greedy":
            lines.append(
                f"[{'ok' if r <= 1.02 else 'NO'}] {task}: {default} (default)/greedy "
                f"= {r:.3f} <= 1.02"
            )
        if rec["placement"] != "ga":
            continue
        lines.append(f"[{'ok' if r <= 1.02 else 'NO'}] {task}: ga/greedy = {r:.3f} <= 1.02")
        if task == "cnn":
            lines.append(f"[{'ok' if r <= 0.80 else 'NO'}] cnn: ga/greedy = {r:.3f} <= 0.80")
    return lines


def table(live: list[dict[str, Any]]) -> str:
    """Text table of the live records; ``*`` marks the default placement (a note below)."""

    def f(v: float | None, w: int = 10, p: int = 3) -> str:
        return f"{v:>{w}.{p}f}" if v is not None else f"{'-':>{w}}"

    default = default_label()
    shown = [r["placement"] + ("*" if r["placement"] == default else "") for r in live]
    w = max([11, *(len(s) + 2 for s in shown)])
    head = (
        f"{'task':<6}{'placement':<{w}}{'rounds':>7}{'round_s':>10}{'std':>8}"
        f"{'/greedy':>10}{'place_s':>9}{'pred_s':>9}{'meas_s':>9}"
    )
    lines = [head, "-" * len(head)]
    for r, name in zip(live, shown, strict=True):
        lines.append(
            f"{r['task']:<6}{name:<{w}}{r['rounds']:>7}{f(r['round_s'])}"
            f"{f(r['round_s_std'], 8)}{f(r['ratio_to_greedy'])}"
            f"{f(r['placement_s'], 9)}{f(r['predicted_s'], 9)}{f(r['measured_s'], 9)}"
        )
    if any(s.endswith("*") for s in shown):
        lines.append(default_note())
    return "\n".join(lines)
