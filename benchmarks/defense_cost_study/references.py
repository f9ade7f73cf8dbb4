"""What the new rules are measured against: ByzFL's implementation of the same rule (when installed)
and the exact reference code, timed or extrapolated, and the agreement checks."""

from __future__ import annotations

import sys
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from defenses import DefenseContext, UpdateBatch, make_defense
from defenses.bulyan import select_exact
from defenses.distances import exact_sq_dist_rows, exact_sq_dists
from defenses.geomed import weiszfeld_reference
from defenses.krum import krum_scores, rank_rows
from defenses.median import median_of_sorted


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


def weighted_reference(name: str, batch: UpdateBatch, f: int) -> Callable[[], torch.Tensor] | None:
    """The sorted ``weighting=samples`` code of ``name`` (numpy argsort of every column)."""
    from defenses.median import weighted_median
    from defenses.trimmedmean import weighted_trimmed_mean

    x, m = batch.updates, batch.num_samples
    table = {
        "median": lambda: weighted_median(x, m),
        "trimmedmean": lambda: weighted_trimmed_mean(x, m, f),
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
    """Iterations our Weiszfeld loop runs on ``batch`` (ByzFL is given as many): it makes one
    distance pass (copy loop) or one blocked pass (cohort-scale CPU loop) more than that."""
    from defenses import geomed

    count = {"n": 0}
    originals = {name: getattr(geomed, name) for name in ("row_distances", "mean_pass")}

    def counting(orig: Callable) -> Callable:
        def call(*args: Any, **kwargs: Any) -> Any:
            count["n"] += 1
            return orig(*args, **kwargs)

        return call

    for name, orig in originals.items():
        setattr(geomed, name, counting(orig))
    try:
        make_defense("geomed")(batch, DefenseContext(round=0, global_flat=torch.zeros(1)))
    finally:
        for name, orig in originals.items():
            setattr(geomed, name, orig)
    return max(1, count["n"] - 1)
