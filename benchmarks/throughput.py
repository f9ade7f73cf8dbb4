"""Training throughput: FedSentry vs Flower's simulation vs a fused reference (the ceiling).

On identical tasks (same clients, model, E, B, learning rate, clients per round) it measures
client-updates/s and samples/s of

* **fedsentry**: the full round loop (selection, placement, Ray device actors or, for a round too
  small to pay for a Ray call, the driver; virtual clock, defense interface, verdicts);
* **flower**: Flower 1.41's simulation engine (Ray backend) running FedAvg with a plain PyTorch
  client, in its fastest tried client-resource setting; on the virtual population each Flower
  client rebuilds its data from its id with FedSentry's own client data source;
* **fused**: the ceiling (``benchmarks/fused.py``): the faster of one process with all threads and
  one process per core with one thread each (plain multiprocessing), training the same clients
  with the same trainer code and no Ray, clock, defense or logging.

Tasks: digits (MLP) and mnist5k (CNN) split over 100 clients, 10 or 100 a round, and a population
of 100,000 virtual clients on digits with 1,000 a round. Start-up and the first (warm-up) rounds
are excluded everywhere; evaluation is not timed.

Usage::

    python benchmarks/throughput.py --quick --json t.json
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.fused import (  # noqa: E402
    FusedProcesses,
    FusedThreads,
    ceiling,
    interleaved,
)
from simulator.config.sections import Config, build_config  # noqa: E402
from simulator.round.engine import Simulation  # noqa: E402
from simulator.run.federation import Federation, build_federation  # noqa: E402
from simulator.training.models import ModelSpec  # noqa: E402


@dataclass(frozen=True)
class Task:
    name: str
    dataset: str
    model: str
    clients_per_round: int
    clients: int = 100
    partition: str = "iid"


TASKS = (
    Task("digits-mlp-k10", "digits", "mlp", 10),
    Task("digits-mlp-k100", "digits", "mlp", 100),
    Task("mnist5k-cnn-k10", "mnist5k", "cnn", 10),
    Task("mnist5k-cnn-k100", "mnist5k", "cnn", 100),
    Task("digits-mlp-virtual100k-k1000", "digits", "mlp", 1000, 100_000, "virtual"),
)
LR, EPOCHS, BATCH = 0.05, 1, 10


def task_config(task: Task, seed: int, num_actors: int) -> Config:
    return build_config(
        flat=dict(
            dataset=task.dataset,
            model=task.model,
            num_clients=task.clients,
            partition=task.partition,
            clients_per_round=task.clients_per_round,
            local_epochs=EPOCHS,
            batch_size=BATCH,
            lr=LR,
            rounds=10**9,
            eval_every=10**9,
            seed=seed,
            backend="ray",
            num_actors=num_actors,
            progress=False,
            plots=False,
            out="/tmp/fedsentry-throughput",
        )
    )


def measure(
    cfg: Config, fed: Federation, warmup: int, rounds: int, min_seconds: float = 0.0
) -> tuple[dict[str, Any], dict[str, Any]]:
    """FedSentry (full engine rounds) and the fused ceiling, timed round by round in turns
    (see :func:`benchmarks.fused.interleaved`): at least ``rounds`` timed rounds each and at
    least ``min_seconds`` of each one's own time (a cheap round is a few ms)."""
    sim = Simulation(cfg, federation=fed)
    fused = [FusedThreads(cfg, fed), FusedProcesses(cfg, fed)]
    where: set[str] = set()
    t0 = time.perf_counter()

    def fedsentry(r: int) -> tuple[int, int]:
        rec = sim.run_round(r, t0)
        where.add(rec.extra["trained_in"])
        return len(rec.participants), int(fed.sizes(rec.participants).sum()) * EPOCHS

    try:
        res = interleaved(
            {"fedsentry": fedsentry, **{f.mode: f.round for f in fused}},
            warmup,
            rounds,
            min_seconds,
        )
    finally:
        sim.close()
        for f in fused:
            f.close()
    fs = {**res["fedsentry"], "actors": sim.executor.num_workers, "trained_in": sorted(where)}
    return fs, ceiling(res, {f.mode: f.mode for f in fused})


def _build(spec: ModelSpec) -> torch.nn.Module:
    return spec.build(seed=0)


def measure_flower(
    fed: Federation, task: Task, seed: int, rounds: int, cpus: tuple[float, ...]
) -> dict[str, Any]:
    from benchmarks.peers.flower_peer import best_flower

    if task.partition == "virtual":
        data: Any = (fed.x_train, fed.y_train, fed.clients)
    else:
        data = [(fed.x_train[i], fed.y_train[i]) for i in fed.client_index]
    # a 1,000-client Flower round takes minutes here: its actor start-up is a negligible part
    # of it, so the large task times its first round instead of discarding it as warm-up
    warmup = 0 if task.clients_per_round >= 1000 else 1
    return best_flower(
        data,
        functools.partial(_build, fed.model_spec),
        rounds=rounds + warmup,
        clients_per_round=task.clients_per_round,
        epochs=EPOCHS,
        batch_size=BATCH,
        lr=LR,
        seed=seed,
        warmup_rounds=warmup,
        cpus_options=cpus,
    )


def build_parser() -> argparse.ArgumentParser:
    """The command line (every flag explained in ``--help``)."""
    p = argparse.ArgumentParser(
        description="Client-update throughput of FedSentry vs Flower vs the fused reference "
        "(the faster of one process x all threads and one process per core) on "
        "identical tasks (E=1, B=10, lr=0.05; 100 clients, or 100,000 virtual "
        "clients with 1,000 a round).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="fewer timed rounds (finishes in a few minutes on 2 cores)",
    )
    p.add_argument(
        "--tasks",
        nargs="*",
        default=[t.name for t in TASKS],
        help=f"subset of tasks: {[t.name for t in TASKS]}",
    )
    p.add_argument(
        "--flower-rounds-large",
        type=int,
        default=None,
        help="timed Flower rounds on the 1,000-a-round virtual task (default 2; "
        "quick: 1; no warm-up round): a Flower round there takes minutes",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="timed rounds for FedSentry and fused (default 30; quick: 10)",
    )
    p.add_argument(
        "--min-seconds",
        type=float,
        default=None,
        help="FedSentry and fused: keep timing rounds until this much wall time "
        "has passed (default 5; quick: 2)",
    )
    p.add_argument(
        "--flower-rounds", type=int, default=None, help="timed Flower rounds (default 5; quick: 2)"
    )
    p.add_argument(
        "--flower-cpus",
        type=float,
        nargs="*",
        default=[1.0, 2.0],
        help="Flower client CPU settings to try; the fastest is reported",
    )
    p.add_argument("--no-flower", action="store_true", help="skip the Flower peer")
    p.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="measurements of FedSentry and fused (each timed round by round in "
        "turns); each system's best is reported (default 3; quick: 2)",
    )
    p.add_argument(
        "--actors", type=int, default=0, help="FedSentry device actors (0 = one per CPU)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of partition and sampling")
    p.add_argument("--json", metavar="FILE", help="write results as JSON")
    p.add_argument("--plot", metavar="PNG", help="write a bar chart of updates/s per task")
    return p


def main(argv: list[str] | None = None) -> int:
    """Measure the tasks; print the table; write ``--json`` / ``--plot``. Returns the exit
    code (2 on bad input, with a one-line error)."""
    args = build_parser().parse_args(argv)
    known = {t.name: t for t in TASKS}
    bad = [t for t in args.tasks if t not in known]
    if bad:
        print(f"error: unknown task {bad[0]!r}; valid: {list(known)}", file=sys.stderr)
        return 2
    rounds = args.rounds or (10 if args.quick else 30)
    frounds = args.flower_rounds or (2 if args.quick else 5)
    min_s = args.min_seconds if args.min_seconds is not None else (2.0 if args.quick else 5.0)
    repeats = args.repeats or (2 if args.quick else 3)
    if rounds < 1 or frounds < 1 or repeats < 1:
        print("error: --rounds, --flower-rounds and --repeats must be >= 1", file=sys.stderr)
        return 2
    if not 0 <= min_s < float("inf"):
        print(f"error: --min-seconds must be a finite number >= 0; got {min_s}", file=sys.stderr)
        return 2
    results = [
        measure_task(known[name], args, rounds, frounds, min_s, repeats) for name in args.tasks
    ]
    print_table(results)
    meta = {
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
        "cpus": torch.get_num_threads(),
    }
    if args.json:
        Path(args.json).write_text(json.dumps({"tasks": results, "meta": meta}, indent=2))
    if args.plot:
        plot(results, Path(args.plot))
    return 0


def measure_task(
    task: Task, args: argparse.Namespace, rounds: int, frounds: int, min_s: float, repeats: int
) -> dict[str, Any]:
    """One task's record: FedSentry's and the fused ceiling's best of ``repeats``
    measurements (timed round by round in turns), Flower's (unless ``--no-flower``) and the
    ratios."""
    name = task.name
    cfg = task_config(task, args.seed, args.actors)
    fed = build_federation(cfg)
    # FedSentry and the ceiling are timed round by round in turns (this machine's speed
    # drifts by tens of percent within minutes); --repeats such measurements, each best
    pairs = []
    for rep in range(repeats):
        print(
            f"[{name}] fedsentry and fused ({rep + 1}/{repeats}) ...", file=sys.stderr, flush=True
        )
        pairs.append(measure(cfg, fed, warmup=3, rounds=rounds, min_seconds=min_s))
    fs = {
        **max((p[0] for p in pairs), key=lambda r: r["updates_per_s"]),
        "repeats": [p[0]["updates_per_s"] for p in pairs],
    }
    fu = {
        **max((p[1] for p in pairs), key=lambda r: r["updates_per_s"]),
        "repeats": [p[1]["updates_per_s"] for p in pairs],
    }
    fl = None
    if not args.no_flower:
        print(f"[{name}] flower ...", file=sys.stderr, flush=True)
        fr, cpus = frounds, tuple(args.flower_cpus)
        if task.clients_per_round >= 1000:  # minutes a round; 2 CPUs a client is slower
            fr = args.flower_rounds_large or (1 if args.quick else 2)
            cpus = cpus[:1]
        fl = measure_flower(fed, task, args.seed, fr, cpus)
    return {
        "name": name,
        "fedsentry": fs,
        "flower": fl,
        "fused": fu,
        "speedup_vs_flower": fs["updates_per_s"] / fl["updates_per_s"] if fl else None,
        "fraction_of_fused": fs["updates_per_s"] / fu["updates_per_s"],
    }


def print_table(results: list[dict[str, Any]]) -> None:
    """Updates/s of each system per task, FedSentry's speed-up over Flower and its share of
    the fused ceiling."""
    hdr = (
        f"{'task':<29} {'fedsentry upd/s':>15} {'flower upd/s':>13} {'fused upd/s':>12} "
        f"{'x flower':>9} {'/ fused':>8}"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        fl = r["flower"]["updates_per_s"] if r["flower"] else float("nan")
        sp = r["speedup_vs_flower"] if r["speedup_vs_flower"] else float("nan")
        print(
            f"{r['name']:<29} {r['fedsentry']['updates_per_s']:>15.1f} {fl:>13.1f} "
            f"{r['fused']['updates_per_s']:>12.1f} {sp:>9.1f} {r['fraction_of_fused']:>8.2f}"
        )


def plot(results: list[dict[str, Any]], path: Path) -> None:
    """Grouped bars (log scale): client updates/s of each system on each task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = [("fedsentry", "FedSentry"), ("flower", "Flower 1.41"), ("fused", "fused ref.")]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.27
    for j, (key, label) in enumerate(systems):
        vals = [r[key]["updates_per_s"] if r[key] else 0.0 for r in results]
        ax.bar([i + (j - 1) * width for i in range(len(results))], vals, width, label=label)
    ax.set_xticks(range(len(results)), [r["name"] for r in results], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("client updates / s")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
