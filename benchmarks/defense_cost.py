"""Aggregation cost of every registered defense at cohort scale, against today's reference code
and ByzFL's implementation of the same rule.

For each ``n`` (rows) and ``d`` (the MLP's and the CNN's flat size on mnist5k, 28x28, 10
classes) it builds synthetic rows (fixed seed: a benign Gaussian cloud around a common
direction plus ``f = max(1, n // 20)`` far outliers) and times, in interleaved turns,

* ``new``: ``make_defense(name, ...)(batch, ctx)`` as the engine calls it;
* ``ref``: the reference code (Krum, Multi-Krum, Bulyan with ``exact=True``; geometric median
  with the old two-norms-per-iteration loop; median, trimmed mean, Bulyan's tail with
  ``torch.sort`` along dim 0). When it would take longer than ``--budget-s``, the O(n^2 d)
  exact distances are timed on a subset of the rows and scaled up ("extrapolated");
* ``byzfl``: ByzFL 0.0.11's aggregator of the same rule, where it has one (geometric median
  with the same ``nu`` and as many iterations as ours ran). Install it with
  ``pip install --no-deps byzfl==0.0.11``: its dependencies pull a torchvision that a CPU-only
  torch cannot load; only its ``aggregators`` module is imported. Without it the column reads
  ``-``.

Agreement: selected rows identical to the exact path's and the aggregate within 1e-6 relative
(the exact distance matrix is computed once per case for that, also when its timing is
extrapolated). Siren, Sageflow and FLTrust get a stub context: ``score_models`` returns
accuracies from row norms, FLTrust a fixed ``g0`` (the cloud's direction).

Usage::

    python benchmarks/defense_cost.py --json /tmp/d.json
    python benchmarks/defense_cost.py --quick --sizes 20 --dims 50
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from defenses import DEFENSES, DefenseContext, UpdateBatch, make_defense  # noqa: E402
from defenses.bulyan import select_exact  # noqa: E402
from defenses.distances import exact_sq_dist_rows, exact_sq_dists  # noqa: E402
from defenses.geomed import weiszfeld_reference  # noqa: E402
from defenses.krum import krum_scores, rank_rows  # noqa: E402
from defenses.median import median_of_sorted  # noqa: E402
from simulator.cli import OneLineParser  # noqa: E402

DISTANCE_RULES = ("krum", "multikrum", "bulyan")


def model_sizes() -> dict[str, int]:
    """Flat sizes of the MLP and the CNN for mnist5k (1x28x28 inputs, 10 classes)."""
    from simulator.training.flat import FlatLayout
    from simulator.training.models import MODELS

    return {m: FlatLayout(MODELS[m]((1, 28, 28), 10)).size for m in ("mlp", "cnn")}


def synthetic(n: int, d: int, seed: int) -> tuple[UpdateBatch, DefenseContext, int]:
    """Benign cloud plus ``f`` outliers; a stub context; ``f``."""
    g = torch.Generator().manual_seed(seed)
    f = max(1, n // 20)
    direction = torch.randn(d, generator=g) * 1e-2
    x = direction + torch.randn(n, d, generator=g) * 1e-2
    x[:f] = -10 * direction + torch.randn(f, d, generator=g) * 1e-1
    batch = UpdateBatch(
        x.contiguous(),
        np.arange(n, dtype=np.int64),
        np.full(n, 20, np.int64),
        np.zeros(n, np.int64),
        {"alarm": np.zeros(n, np.int64)},
    )

    def score(models: torch.Tensor) -> dict[str, np.ndarray]:
        norm = models.double().norm(dim=1).numpy()
        acc = 1.0 / (1.0 + norm / (np.median(norm) + 1e-12))
        return {"accuracy": acc, "loss": 1 - acc, "entropy": 1 - acc}

    ctx = DefenseContext(
        round=0,
        global_flat=torch.zeros(d),
        score_models=score,
        public_x=torch.zeros(100, 1, 28, 28),
        public_y=torch.zeros(100, dtype=torch.int64),
        base_model=lambda r: torch.zeros(d),
        server_update=lambda: direction,
        rng=np.random.default_rng(seed),
    )
    return batch, ctx, f


def load_byzfl() -> Any:
    """ByzFL's aggregators module, or None. Loaded without ``byzfl/__init__`` (it imports
    torchvision, which a CPU-only torch build cannot load)."""
    try:
        import importlib.util

        spec = importlib.util.find_spec("byzfl")
        if spec is None or not spec.submodule_search_locations:
            return None
        if "byzfl" not in sys.modules:
            pkg = types.ModuleType("byzfl")
            pkg.__path__ = list(spec.submodule_search_locations)
            sys.modules["byzfl"] = pkg
        from byzfl.aggregators import aggregators

        return aggregators
    except Exception:  # noqa: BLE001 - any import failure means "not available"
        return None


def byzfl_rule(agg: Any, name: str, f: int, iters: int, nu: float) -> Callable | None:
    table = {
        "krum": lambda: agg.Krum(f=f),
        "multikrum": lambda: agg.MultiKrum(f=f),
        "median": lambda: agg.Median(),
        "trimmedmean": lambda: agg.TrMean(f=f),
        "geomed": lambda: agg.GeometricMedian(nu=nu, T=iters),
    }
    return None if agg is None or name not in table else table[name]()


def reference(name: str, batch: UpdateBatch, f: int, d2: np.ndarray | None) -> Callable | None:
    """Today's code of ``name`` as a thunk; ``d2`` replaces the exact distances (extrapolated
    cases: their cost is added separately)."""
    x, ids, n = batch.updates, batch.client_ids, len(batch)

    def dists() -> np.ndarray:
        return exact_sq_dists(x) if d2 is None else d2

    def krum(m: int) -> torch.Tensor:
        chosen = rank_rows(krum_scores(dists(), n - f - 2), ids)[:m]
        return x[torch.from_numpy(chosen)].double().mean(dim=0)

    def bulyan() -> torch.Tensor:
        chosen = select_exact(dists(), f, n - 2 * f, ids)
        s = torch.sort(x.double()[torch.tensor(chosen)], dim=0).values
        close = torch.argsort((s - median_of_sorted(s)).abs(), dim=0, stable=True)[: n - 4 * f]
        return torch.gather(s, 0, close).mean(dim=0)

    def geomed() -> torch.Tensor:
        a = torch.from_numpy(batch.num_samples.astype(np.float64))
        return weiszfeld_reference(x.double(), a / a.sum(), 1e-6, 100, 1e-10)[0]

    def sort() -> torch.Tensor:
        return torch.sort(x.double(), dim=0).values

    table = {
        "krum": lambda: krum(1),
        "multikrum": lambda: krum(n - f),
        "bulyan": bulyan,
        "geomed": geomed,
        "median": lambda: median_of_sorted(sort()),
        "trimmedmean": lambda: sort()[f : n - f].mean(dim=0),
    }
    return table.get(name)


def exact_cost(x: torch.Tensor, budget: float) -> tuple[float, bool]:
    """Seconds of the exact ``n x n`` distances: timed in full when a probe says it fits in
    ``budget``, else timed on a subset of rows and scaled by ``n / rows`` ("extrapolated")."""
    n = x.shape[0]
    xd = x.double()
    rows = max(1, min(n, 4))
    t0 = time.perf_counter()
    exact_sq_dist_rows(xd, range(rows))
    per_row = (time.perf_counter() - t0) / rows
    if per_row * n <= budget:
        t0 = time.perf_counter()
        exact_sq_dists(x)
        return time.perf_counter() - t0, False
    rows = max(rows, min(n, int(budget / 4 / per_row)))
    t0 = time.perf_counter()
    exact_sq_dist_rows(xd, range(rows))
    return (time.perf_counter() - t0) * n / rows, True


def agreement(new: Any, ref_delta: torch.Tensor | None, kept: list[bool] | None) -> dict:
    out: dict[str, Any] = {}
    if ref_delta is not None:
        den = float(ref_delta.double().norm()) or 1.0
        ref32 = ref_delta.to(new.delta.dtype).double()  # both rounded to the row dtype
        out["rel_err"] = float((new.delta.double() - ref32).norm()) / den
    if kept is not None:
        out["same_rows"] = [v.kept for v in new.verdicts] == kept
    return out


def run_case(n: int, model: str, d: int, args: Any, byz: Any) -> list[dict[str, Any]]:
    batch, ctx, f = synthetic(n, d, args.seed)
    d2 = exact_sq_dists(batch.updates)  # once per case: agreement + reference scores
    dcost, extrap = exact_cost(batch.updates, args.budget_s)
    rows = []
    for name in args.defenses:
        p = {"f": f} if name in (*DISTANCE_RULES, "trimmedmean") else {}
        if make_defense(name, **p).precondition(n) is not None:
            continue
        new = make_defense(name, **p)(batch, ctx)
        iters = geomed_iterations(batch) if name == "geomed" else 100
        ref = reference(name, batch, f, d2 if name in DISTANCE_RULES else None)
        kept = exact_kept(name, d2, batch, f) if name in DISTANCE_RULES else None
        ref_delta = ref() if ref is not None else None
        bz = byzfl_rule(byz, name, f, iters, 1e-6)
        thunks: dict[str, Callable] = {
            "new": lambda nm=name, p=p: make_defense(nm, **p)(batch, ctx)
        }
        if ref is not None:
            thunks["ref"] = ref
        if bz is not None:
            thunks["byzfl"] = lambda bz=bz: bz(batch.updates)
        times: dict[str, list[float]] = {k: [] for k in thunks}
        for _ in range(args.repeats):  # interleaved turns
            for k, fn in thunks.items():
                t0 = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t0)
        rec: dict[str, Any] = {
            "n": n,
            "model": model,
            "d": d,
            "defense": name,
            "f": f,
            **agreement(new, ref_delta, kept),
        }
        for k, ts in times.items():
            add = dcost if (k == "ref" and name in DISTANCE_RULES) else 0.0
            rec[f"{k}_s"] = statistics.median(ts) + add
            rec[f"{k}_spread_s"] = max(ts) - min(ts)
        rec["ref_extrapolated"] = bool(extrap and name in DISTANCE_RULES)
        if "ref_s" in rec:
            rec["speedup_vs_ref"] = rec["ref_s"] / rec["new_s"]
        if "byzfl_s" in rec:
            rec["speedup_vs_byzfl"] = rec["byzfl_s"] / rec["new_s"]
        if name in ("siren", "sageflow", "fltrust"):
            rec["note"] = "stub context"
        rows.append(rec)
        print(line(rec), flush=True)
    return rows


def exact_kept(name: str, d2: np.ndarray, batch: UpdateBatch, f: int) -> list[bool]:
    """Rows kept by the exact path, from the exact matrix ``d2``."""
    n, ids = len(batch), batch.client_ids
    if name == "bulyan":
        chosen = select_exact(d2, f, n - 2 * f, ids)
    else:
        chosen = rank_rows(krum_scores(d2, n - f - 2), ids)[: 1 if name == "krum" else n - f]
    keep = np.zeros(n, dtype=bool)
    keep[list(chosen)] = True
    return keep.tolist()


def geomed_iterations(batch: UpdateBatch) -> int:
    """Iterations our Weiszfeld loop runs on ``batch`` (ByzFL is given as many)."""
    from defenses import geomed

    count = {"n": 0}
    orig = geomed.row_distances

    def counting(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        count["n"] += 1
        return orig(x, v)

    geomed.row_distances = counting
    try:
        make_defense("geomed")(batch, DefenseContext(round=0, global_flat=torch.zeros(1)))
    finally:
        geomed.row_distances = orig
    return max(1, count["n"] - 1)


HEAD = (
    f"{'n':>5} {'model':>5} {'d':>7} {'defense':<12} {'new s':>8} {'ref s':>9} "
    f"{'byzfl s':>8} {'x ref':>7} {'x byzfl':>7} {'same':>5} {'rel err':>8}  note"
)


def line(r: dict[str, Any]) -> str:
    def num(k: str, fmt: str) -> str:
        return format(r[k], fmt) if k in r else "-"

    ref = num("ref_s", ".3f") + ("*" if r.get("ref_extrapolated") else "")
    return (
        f"{r['n']:>5} {r['model']:>5} {r['d']:>7} {r['defense']:<12} {num('new_s', '.3f'):>8} "
        f"{ref:>9} {num('byzfl_s', '.3f'):>8} {num('speedup_vs_ref', '.1f'):>7} "
        f"{num('speedup_vs_byzfl', '.1f'):>7} {str(r.get('same_rows', '-')):>5} "
        f"{num('rel_err', '.1e'):>8}  {r.get('note', '')}"
    )


def parse_args(argv: list[str] | None) -> Any:
    p = OneLineParser(
        prog="python benchmarks/defense_cost.py",
        description="Aggregation time of every registered defense at n rows and "
        "the MLP's / CNN's parameter count (mnist5k), against the "
        "reference (exact) code and ByzFL, with agreement checks.",
    )
    p.add_argument(
        "--sizes", default=None, metavar="N,N", help="row counts (default 100,1000; --quick: 100)"
    )
    p.add_argument(
        "--dims",
        default=None,
        metavar="D,D",
        help="row lengths instead of the models' sizes (named d<D> in the table)",
    )
    p.add_argument(
        "--defenses",
        default=None,
        metavar="NAME,NAME",
        help=f"defenses to time (default all: {','.join(sorted(DEFENSES))})",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="interleaved timing turns per case (default 3; --quick: 1)",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=30.0,
        help="time the exact distances in full only below this many seconds, else "
        "on a subset of rows, extrapolated (default 30)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic rows (default 0)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="one turn, n=100 only (unless --sizes), for a smoke run",
    )
    p.add_argument("--no-byzfl", action="store_true", help="skip the ByzFL comparison")
    p.add_argument("--json", metavar="FILE", help="also write every figure to FILE as JSON")
    a = p.parse_args(argv)
    try:
        a.sizes = [int(s) for s in (a.sizes or ("100" if a.quick else "100,1000")).split(",")]
        a.dims = None if a.dims is None else [int(s) for s in a.dims.split(",")]
    except ValueError:
        p.error("--sizes/--dims: expected comma-separated integers")
    if min(a.sizes) < 3 or (a.dims is not None and min(a.dims) < 1):
        p.error("--sizes must be >= 3 and --dims >= 1")
    a.defenses = sorted(DEFENSES) if a.defenses is None else a.defenses.split(",")
    unknown = sorted(set(a.defenses) - set(DEFENSES))
    if unknown:
        p.error(f"--defenses: unknown {unknown[0]!r}; valid: {sorted(DEFENSES)}")
    a.repeats = a.repeats if a.repeats is not None else (1 if a.quick else 3)
    if a.repeats < 1 or not a.budget_s > 0:
        p.error("--repeats must be >= 1 and --budget-s > 0")
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    dims = {f"d{d}": d for d in args.dims} if args.dims else model_sizes()
    byz = None if args.no_byzfl else load_byzfl()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, device "
        f"{'cuda' if torch.cuda.is_available() else 'cpu'}; byzfl "
        f"{'loaded' if byz is not None else 'not available'}; * = extrapolated reference"
    )
    print(HEAD)
    rows = [
        r for n in args.sizes for model, d in dims.items() for r in run_case(n, model, d, args, byz)
    ]
    if args.json:
        Path(args.json).write_text(
            json.dumps({"rows": rows, "argv": argv or sys.argv[1:]}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
