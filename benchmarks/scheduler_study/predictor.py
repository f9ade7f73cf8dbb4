"""Predictor part of ``benchmarks/scheduler.py``: chunk-time prediction on FedSentry's own chunks.

The chunks come from recorded runs (:mod:`benchmarks.scheduler_study.live`) of each task under
placements that cut rounds differently (greedy: one chunk of ~100 clients per actor; lpt and ga:
sorted step bands of a few to tens of clients; ga with the linear predictor: other cuts again).
The split is by round, never by chunk: the last ~30% of every run's rounds are held out (all runs
of a task have the same rounds, and one seed selects the same clients in a round whatever the
placement, so no held-out round's clients appear in training). Per task, a
:class:`~simulator.scheduler.predictor.GBDTPredictor` and Parrot's
:class:`~simulator.scheduler.predictor.LinearPredictor` are fitted on the training rounds' chunks
(features: clients, longest and total steps, samples, the model's training FLOPs per sample, the
actor kind's code) and scored by MAPE on the held-out chunks (also WAPE, ``sum |p - m| / sum m``,
which weights chunks by their time).

Decision regret: the true time of a schedule that was never executed is unknown, so an *oracle*
stands in for it: a GBDT chunk cost fitted on all chunks of the task (training and held-out).
For each held-out round, its tasks are rebuilt (the event's selected clients, their sizes from
the federation, the configured local epochs, as the engine's plan builds them) and placed twice
by ``ga``: once with the chunk cost learned from the training rounds, once with the oracle's.
Regret = oracle-predicted makespan of the first schedule / that of the second (the GA is a
heuristic, so a value slightly below 1 is possible). ``regret_linear`` does the same with the
linear fit in place of the learned GBDT.

What the timing noise allows: ``mape_oracle`` is the held-out MAPE of a GBDT fitted on all
chunks, the held-out ones included (how well these features can describe this run's times at
all); ``mape_repeat`` compares the chunks measured in both repeats of a placement; and
``pair_bound`` is the least MAPE that any predictor can score on those chunks (a hard bound:
one prediction for two different measurements). The benchmark's proposed bar judges GBDT
against the oracle (:func:`predictor_checks`). These yardsticks are computed in
:mod:`benchmarks.scheduler_study.timing_noise`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks.scheduler_study.live import Run, TaskSetup
from benchmarks.scheduler_study.timing_noise import oracle_predictions, pair_bound, repeat_mape
from simulator.scheduler.predictor import GBDTPredictor, LinearPredictor, features, mape

HELD_OUT = 0.3  # share of each run's last rounds held out


def held_out_rounds(num_rounds: int) -> int:
    """How many of a run's last rounds are held out: ``max(1, round(0.3 * rounds))``, and at
    least one round is left for training (ValueError on a run of fewer than 2 rounds)."""
    if num_rounds < 2:
        raise ValueError(f"predictor: a run needs >= 2 rounds to hold one out, got {num_rounds}")
    return min(num_rounds - 1, max(1, round(HELD_OUT * num_rounds)))


def kind_codes(kinds: Sequence[str]) -> dict[str, int]:
    """Kind name -> code, first seen first numbered (as the engine's scheduler numbers them)."""
    return {k: i for i, k in enumerate(dict.fromkeys(kinds))}


def chunk_table(
    runs: Sequence[Run], setup: TaskSetup
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every timed chunk of ``runs``: features ``[n, 6]``, seconds, whether its round is held
    out, and its round."""
    codes = kind_codes(setup.kinds)
    xs, ys, held, rnd = [], [], [], []
    for run in runs:
        last = 1 + max(int(e["round"]) for e in run.events)
        first_held = last - held_out_rounds(last)
        for ev in run.events:
            rows = [c for c in ev.get("chunks") or [] if float(c["seconds"]) > 0]
            if not rows:
                continue
            kind = [codes.get(str(c.get("kind")), 0) for c in rows]
            x = features(
                [{**c, "kind": k} for c, k in zip(rows, kind, strict=True)], flops=setup.flops
            )
            xs.append(x)
            ys.extend(float(c["seconds"]) for c in rows)
            held.extend([int(ev["round"]) >= first_held] * len(rows))
            rnd.extend([int(ev["round"])] * len(rows))
    if not xs:
        raise ValueError(f"predictor: the {setup.task} runs reported no timed chunks")
    return (
        np.concatenate(xs),
        np.asarray(ys, np.float64),
        np.asarray(held, bool),
        np.asarray(rnd, np.int64),
    )


def wape(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Weighted absolute percentage error ``sum |p - m| / sum m``."""
    return float(np.abs(predicted - measured).sum() / measured.sum())


def regret(
    runs: Sequence[Run],
    setup: TaskSetup,
    x: np.ndarray,
    y: np.ndarray,
    held: np.ndarray,
    ga_params: dict[str, Any],
    predictor: str = "gbdt",
) -> list[float]:
    """Decision regret of every distinct held-out round with the ``predictor`` fitted on the
    training rounds (see the module docstring)."""
    from actors.request import TrainTask
    from simulator.placement import PlaceContext, make_placement
    from simulator.placement.base import predict_groups
    from simulator.scheduler.chunking import ChunkCost

    learned = ChunkCost(setup.flops, setup.batch_size, predictor, setup.seed)
    learned.observe(x[~held], y[~held])
    oracle = ChunkCost(setup.flops, setup.batch_size, "gbdt", setup.seed)
    oracle.observe(x, y)
    codes = kind_codes(setup.kinds)
    actor_codes = np.array([codes[k] for k in setup.kinds], np.int64)
    ga = make_placement("ga", **ga_params)
    seen: set[tuple[int, tuple[int, ...]]] = set()
    out: list[float] = []
    for run in runs:
        last = 1 + max(int(e["round"]) for e in run.events)
        for rnd in range(last - held_out_rounds(last), last):
            ids, sizes = run.sizes[rnd]
            if (rnd, tuple(ids)) in seen:
                continue
            seen.add((rnd, tuple(ids)))
            tasks = [TrainTask(c, setup.epochs, 0, n) for c, n in zip(ids, sizes, strict=True)]
            seed = setup.seed * 1_000_003 + rnd  # the engine's per-round placement seed
            spans = []
            for cost in (learned, oracle):
                placed = ga.place(tasks, PlaceContext(actor_codes, cost, setup.batch_size, seed))
                judged = predict_groups(
                    placed.groups,
                    placed.chunks,
                    PlaceContext(actor_codes, oracle, setup.batch_size),
                )
                spans.append(max(judged, default=0.0))
            out.append(spans[0] / spans[1] if spans[1] > 0 else 1.0)
    return out


def evaluate(
    runs: Sequence[Run], setups: Sequence[TaskSetup], ga_params: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, dict[str, np.ndarray]]]:
    """The ``predictor`` record (pooled over tasks, and ``per_task``) and, per task, the
    held-out chunks' measured and predicted seconds (for the scatter plot)."""
    per_task: dict[str, dict[str, Any]] = {}
    points: dict[str, dict[str, np.ndarray]] = {}
    all_m, all_g, all_l, all_o, regrets, regrets_lin = [], [], [], [], [], []
    for setup in setups:
        mine = [r for r in runs if r.task == setup.task]
        x, y, held, _ = chunk_table(mine, setup)
        if held.all() or not held.any():
            raise ValueError(f"predictor: the {setup.task} runs need training and held-out chunks")
        gbdt, lin = GBDTPredictor(seed=setup.seed), LinearPredictor()
        for model in (gbdt, lin):
            model.observe(x[~held], y[~held])
        m, pg, pl = y[held], gbdt.predict(x[held]), lin.predict(x[held])
        po = oracle_predictions(x, y, held, setup.seed)
        reg = regret(mine, setup, x, y, held, ga_params)
        reg_lin = regret(mine, setup, x, y, held, ga_params, "linear")
        per_task[setup.task] = {
            "mape_gbdt": mape(pg, m),
            "mape_linear": mape(pl, m),
            "wape_gbdt": wape(pg, m),
            "wape_linear": wape(pl, m),
            "regret": float(np.mean(reg)),
            "regret_max": float(np.max(reg)),
            "regret_linear": float(np.mean(reg_lin)),
            "regret_rounds": len(reg),
            "mape_repeat": repeat_mape(mine),
            "mape_oracle": mape(po, m),
            "pair_bound": pair_bound(mine),
            "train_chunks": int((~held).sum()),
            "heldout_chunks": int(held.sum()),
            "runs": sorted({f"{r.label}#{r.repeat}" for r in mine}),
        }
        points[setup.task] = {"measured": m, "gbdt": pg, "linear": pl}
        all_m.append(m)
        all_g.append(pg)
        all_l.append(pl)
        all_o.append(po)
        regrets.extend(reg)
        regrets_lin.extend(reg_lin)
    m, g, li = np.concatenate(all_m), np.concatenate(all_g), np.concatenate(all_l)
    rec = {
        "mape_gbdt": mape(g, m),
        "mape_linear": mape(li, m),
        "regret": float(np.mean(regrets)),
        "regret_max": float(np.max(regrets)),
        "regret_linear": float(np.mean(regrets_lin)),
        "wape_gbdt": wape(g, m),
        "wape_linear": wape(li, m),
        "train_chunks": sum(t["train_chunks"] for t in per_task.values()),
        "heldout_chunks": int(len(m)),
        "mape_repeat": repeat_mape(runs),
        "mape_oracle": mape(np.concatenate(all_o), m),
        "pair_bound": pair_bound(runs),
        "per_task": per_task,
    }
    return rec, points


def table(rec: dict[str, Any]) -> str:
    """Text table of the predictor record (per task, then pooled)."""
    head = (
        f"{'task':<8}{'train':>7}{'held':>6}{'mape_gbdt':>11}{'mape_lin':>10}{'oracle':>8}"
        f"{'wape_gbdt':>11}{'wape_lin':>10}{'regret':>8}{'max':>8}{'reg_lin':>9}"
    )
    lines = [head, "-" * len(head)]
    rows = [*rec["per_task"].items(), ("pooled", rec)]
    for name, r in rows:
        lines.append(
            f"{name:<8}{r['train_chunks']:>7}{r['heldout_chunks']:>6}"
            f"{r['mape_gbdt']:>11.3f}{r['mape_linear']:>10.3f}"
            f"{r.get('mape_oracle', float('nan')):>8.3f}{r['wape_gbdt']:>11.3f}"
            f"{r['wape_linear']:>10.3f}{r['regret']:>8.3f}{r['regret_max']:>8.3f}"
            f"{r['regret_linear']:>9.3f}"
        )
    return "\n".join(lines)


def predictor_checks(rec: dict[str, Any]) -> list[str]:
    """Acceptance lines of the predictor: GBDT MAPE <= 15% and below the linear fit's; decision
    regret <= 1.05. Then the proposed bar and what the timing noise allows (``(info)``): on a
    shared machine the noise alone can put 15% out of reach of any predictor, so GBDT's MAPE is
    also judged against an oracle GBDT fitted on the held-out chunks themselves (<= 1.15 x its
    MAPE; marked ``[info]`` when the 0.15 bar is met, which it then does not replace), beside
    the repeat-to-repeat MAPE and the hard bound on chunks measured twice (see the module
    docstring)."""
    g, li, r = rec["mape_gbdt"], rec["mape_linear"], rec["regret"]
    lines = [
        f"[{'ok' if g <= 0.15 and g < li else 'NO'}] gbdt MAPE = {g:.3f} <= 0.15 and < "
        f"linear {li:.3f}",
        f"[{'ok' if r <= 1.05 else 'NO'}] decision regret = {r:.3f} "
        f"<= 1.05 (max {rec['regret_max']:.3f})",
    ]
    oracle = rec.get("mape_oracle")
    if oracle is not None:
        # the proposed bar stands in for the only when the is missed
        mark = "info" if g <= 0.15 and g < li else "ok" if g <= 1.15 * oracle and g < li else "NO"
        lines.append(
            f"[{mark}] gbdt MAPE = {g:.3f} <= 1.15 x the oracle's {oracle:.3f} "
            "(fitted on the held-out chunks too) and < linear"
            + (" (the proposed bar, not needed: the 0.15 bar is met)" if mark == "info" else "")
        )
    floor, bound = rec.get("mape_repeat"), rec.get("pair_bound")
    if floor is not None and bound is not None:
        lines.append(
            f"(info) repeat-to-repeat MAPE {floor:.3f}; no predictor scores below "
            f"{bound:.3f} on the chunks measured twice"
        )
    return lines
