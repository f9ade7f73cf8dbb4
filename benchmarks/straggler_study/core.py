"""The straggler study's runs: one cell (a FedSentry run on the virtual clock with its events,
quartile accuracies and wall time) and the study of every policy x seed (x attack fraction) on
one shared population per seed.

Every cell of a study gets the same budget of virtual time (``--virtual-hours``): synchronous
policies (wait_for_all, deadline, deadline_carryover, first_k, overcommit) and asynchronous ones
(fedbuff, fedasync, where a "round" is a server step), on 10^5 virtual devices by default with
FedScale-style log-normal speeds, the diurnal availability model (or ``--availability-trace``)
and mid-training dropout.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.straggler_study.final import global_train_loss, quartile_accuracy
from benchmarks.straggler_study.mixes import dominant_classes
from benchmarks.straggler_study.saved import CELL_FILE, finished_cell, run_inputs, save_cell

#: the study's device and training settings (FedScale-like phones: tens of ms per sample)
BASE = {
    "dataset": "digits",
    "partition": "virtual",
    "dirichlet_alpha": 0.5,
    "model": "mlp",
    "hidden": 64,
    "local_epochs": 2,
    "batch_size": 10,
    "lr": 0.05,
    "compute_ms_median": 50.0,
    "availability_low": 0.5,
    "dropout": True,
    "progress": False,
    "plots": False,
}


def base_config(a: argparse.Namespace, seed: int) -> dict[str, Any]:
    """The flat config shared by every run of one seed."""
    flat = dict(
        BASE,
        num_clients=a.population,
        clients_per_round=a.clients_per_round,
        seed=seed,
        rounds=a.rounds,
        max_virtual_hours=a.virtual_hours,
        defense=a.defense,
        dropout=not a.no_dropout,
        inline=a.inline,
    )
    if a.availability_trace:
        flat["availability_trace"] = a.availability_trace
    backend = a.backend or ("ray" if a.ray_address else "local")
    flat["backend"] = backend
    if a.ray_address:
        flat["ray_address"] = a.ray_address
    if a.num_actors:
        flat["num_actors"] = a.num_actors
    flat.update(a.extra)
    return flat


def skew_speeds(fed: Any, skew: float) -> Any:
    """The population with devices whose data is mostly the lower half of the classes made
    ``exp(skew)`` times slower per sample: device speed correlated with the data, as when cheap
    phones are common where some classes are (virtual clients only; one label-mix draw per
    device, all devices at once: :func:`~benchmarks.straggler_study.mixes.dominant_classes`)."""
    import dataclasses

    from simulator.data.virtual import VirtualData

    if not isinstance(fed.clients, VirtualData):
        raise ValueError("--speed-label-skew needs virtual clients (partition=virtual)")
    dominant = dominant_classes(fed.clients)
    half = len(fed.clients.classes) / 2
    slow = np.where(dominant < half, np.exp(skew), 1.0)
    pop = fed.population
    return dataclasses.replace(pop, compute_ms_per_sample=pop.compute_ms_per_sample * slow)


def deadline_for(fed: Any, cfg: Any, quantile: float) -> float:
    """The ``quantile`` of the devices' update durations (compute + transfer, as the engine's
    plan computes them), from 4,000 devices drawn with a fixed seed: the deadline that leaves
    ``1 - quantile`` stragglers."""
    from simulator.population.clock import transfer_seconds_unchecked

    pop = fed.population
    ids = np.random.default_rng(cfg.experiment.seed).choice(
        len(pop), min(4000, len(pop)), replace=False
    )
    sizes = fed.clients.sizes(ids).astype(np.float64)
    comp = pop.compute_seconds(
        ids,
        sizes,
        np.full(len(ids), float(cfg.algorithm.local_epochs)),
        np.float64(cfg.clock.compute_factor),
        fed.model_spec.train_flops_per_sample(),
    )
    dense = np.float64(4.0 * fed.layout.size)
    tr = transfer_seconds_unchecked(
        dense,
        dense,
        up_kbps=pop.up_kbps[ids],
        down_kbps=pop.down_kbps[ids],
        latency_ms=pop.latency_ms[ids],
    )
    return float(np.quantile(comp + tr, quantile))


def policy_settings(
    policy: str, k: int, deadline_s: float, overrides: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Config fields of one policy: its parameters and an evaluation every ~K updates."""
    params: dict[str, Any] = {}
    per_step = k
    if policy in ("deadline", "deadline_carryover"):
        params["deadline_s"] = deadline_s
    if policy == "fedbuff":
        params = {"k": max(1, k // 10)}
        per_step = params["k"]
    if policy == "fedasync":
        # one server step per arrival: a fifth of the cohort in flight keeps the step count,
        # and the run time, near the other policies' (FedAsync's own experiments use few)
        params = {"concurrency": max(1, k // 5)}
        per_step = 1
    params.update(overrides.get(policy, {}))
    per_step = int(params.get("k", per_step)) if policy == "fedbuff" else per_step
    if policy == "fedasync":
        k = int(params.get("concurrency", k))
    return {
        "round_policy": policy,
        "policy_params": params,
        "eval_every": max(1, k // max(1, per_step)),
    }


def run_cell(
    flat: dict[str, Any],
    out: Path,
    fed: Any = None,
    quartiles: bool = True,
    global_loss: bool = False,
    executor: Any = None,
    resume: bool = False,
    speed_label_skew: float = 0.0,
) -> dict[str, Any]:
    """One run: its events, quartile accuracies and wall time; writes its events.jsonl and,
    once it has finished, ``cell.json``. ``resume``: a run of this very cell that finished in
    ``out`` before is read back instead (:func:`finished_cell`). ``speed_label_skew``: the skew
    ``fed``'s population was built with (:func:`skew_speeds`), part of what a kept run matches.

    ``global_loss``: also the final global model's training loss over every client's data (the
    FedProx paper's "training loss"; small populations only)."""
    from simulator.config.sections import build_config
    from simulator.round.engine import Simulation

    inputs = run_inputs(flat, speed_label_skew)
    kept = finished_cell(flat, out, inputs) if resume else None
    if kept is not None:
        return kept
    out.mkdir(parents=True, exist_ok=True)
    (out / CELL_FILE).unlink(missing_ok=True)  # an earlier run's: this one has not finished
    cfg = build_config(flat=dict(flat, out=str(out)))
    events: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    sim = Simulation(cfg, federation=fed, executor=executor)
    try:
        with (out / "events.jsonl").open("w") as fh:

            def keep(rec: Any) -> None:
                ev = rec.to_event()
                ev.pop("verdicts", None)
                events.append(ev)
                fh.write(json.dumps(ev) + "\n")

            sim.run(on_record=keep)
        quart = quartile_accuracy(sim) if quartiles else None
        loss = global_train_loss(sim) if global_loss else None
    finally:
        sim.close()
    nodes = getattr(sim.executor, "actor_nodes", lambda: [])()
    cell = {
        "events": events,
        "quartiles": quart,
        "run_seconds": time.perf_counter() - t0,
        "global_train_loss": loss,
        "actor_node_ids": [n[:12] for n in nodes],
    }
    save_cell(flat, out, dict(cell, inputs=inputs))
    return cell


def study(
    a: argparse.Namespace, runs: list[dict[str, Any]] | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every cell of the study; returns the runs and the resolved settings. ``runs``: the list
    each finished run is appended to (a stopped study's caller counts them; default: a new
    one)."""
    from tqdm import tqdm

    cells = [(s, f, p) for s in range(a.seeds) for f in a.attack_fractions for p in a.policies]
    bar = tqdm(total=len(cells), desc="stragglers", unit="run", disable=a.no_progress)
    runs = [] if runs is None else runs
    settings: dict[str, Any] = {"policies": {}, "fractions": a.attack_fractions}
    fed, fed_seed, executor = None, None, None
    try:
        for seed, frac, policy in cells:
            if fed_seed != seed:  # the last seed's population goes before the next is built
                fed = None
                fed, executor = _federation(a, seed, settings, executor)
                fed_seed = seed
            runs.append(_cell(a, seed, frac, policy, fed, executor, settings, bar))
    finally:
        bar.close()  # before a stopped study's line saying how to go on
        if executor is not None:
            executor.shutdown()
    settings["base"] = base_config(a, 0)
    nodes = {n for r in runs for n in r["actor_node_ids"]}
    settings["actor_nodes"], settings["actor_node_ids"] = len(nodes), sorted(nodes)
    return runs, settings


def _federation(
    a: argparse.Namespace, seed: int, settings: dict[str, Any], old: Any
) -> tuple[Any, Any]:
    """The data, devices and (on Ray) actor pool that every run of ``seed`` shares."""
    from simulator.config.sections import build_config
    from simulator.run.budget import check_budget
    from simulator.run.executor import make_executor
    from simulator.run.federation import build_federation

    if old is not None:
        old.shutdown()
    cfg0 = build_config(flat=base_config(a, seed))
    check_budget(cfg0)  # a study that cannot fit stops here, before anything starts
    fed = build_federation(cfg0)
    if a.speed_label_skew:
        fed.population = skew_speeds(fed, a.speed_label_skew)
    settings["deadline_s"] = deadline_for(fed, cfg0, a.deadline_quantile)
    executor = make_executor(cfg0, fed) if cfg0.execution.backend == "ray" else None
    return fed, executor


def _cell(
    a: argparse.Namespace,
    seed: int,
    frac: float,
    policy: str,
    fed: Any,
    executor: Any,
    settings: dict[str, Any],
    bar: Any,
) -> dict[str, Any]:
    """One run of the study."""
    out = Path(a.out)
    flat = base_config(a, seed)
    if frac > 0:
        flat.update(attack=a.attack, attack_fraction=frac)
    flat.update(
        policy_settings(policy, a.clients_per_round, settings["deadline_s"], a.policy_params)
    )
    settings["policies"][policy] = {
        "policy_params": flat["policy_params"],
        "eval_every": flat["eval_every"],
    }
    name = f"{policy}-s{seed}" + (f"-f{frac:g}" if len(a.attack_fractions) > 1 else "")
    bar.set_postfix_str(name)
    cell = run_cell(
        flat,
        out / "runs" / name,
        fed,
        executor=executor,
        resume=a.resume,
        speed_label_skew=a.speed_label_skew,
    )
    bar.update(1)
    label = policy if len(a.attack_fractions) == 1 else f"{policy}@{frac:g}"
    return {"policy": label, "seed": seed, **cell}
