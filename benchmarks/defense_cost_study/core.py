"""One timing case: synthetic rows at n and d, every rule timed in interleaved turns against the
references, and its table line."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from benchmarks.defense_cost_study.references import (
    agreement,
    byzfl_rule,
    exact_cost,
    exact_kept,
    geomed_iterations,
    reference,
    weighted_reference,
)
from defenses import DefenseContext, UpdateBatch, make_defense
from defenses.distances import exact_sq_dists

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


def sample_weighted(batch: UpdateBatch, seed: int) -> UpdateBatch:
    """The same rows with log-normal sample counts (median 32, 4 to 512: the crossdevice
    devices), for the ``weighting=samples`` cases."""
    m = np.random.default_rng(seed).lognormal(np.log(32), 1.0, len(batch))
    m = np.clip(np.round(m), 4, 512).astype(np.int64)
    return UpdateBatch(batch.updates, batch.client_ids, m, batch.base_rounds, batch.signals)


#: rules also timed with ``weighting=samples`` (label ``NAME/samples``), against the sorted
#: weighted code they used before the order-statistics kernels
WEIGHTED_RULES = ("median", "trimmedmean")


def run_case(n: int, model: str, d: int, args: Any, byz: Any) -> list[dict[str, Any]]:
    batch, ctx, f = synthetic(n, d, args.seed)
    d2 = exact_sq_dists(batch.updates)  # once per case: agreement + reference scores
    dcost, extrap = exact_cost(batch.updates, args.budget_s)
    rows = []
    for name in args.defenses:
        p = {"f": f} if name in (*DISTANCE_RULES, "trimmedmean") else {}
        if make_defense(name, **p).precondition(n) is not None:
            continue
        cases = [
            (name, batch, p, reference(name, batch, f, d2 if name in DISTANCE_RULES else None))
        ]
        if name in WEIGHTED_RULES:
            wb = sample_weighted(batch, args.seed)
            cases.append(
                (
                    f"{name}/samples",
                    wb,
                    {**p, "weighting": "samples"},
                    weighted_reference(name, wb, f),
                )
            )
        for label, b, params, ref in cases:
            rec = time_rule(label, name, params, b, ctx, f, d2, ref, byz, args)
            rec.update(n=n, model=model, d=d)
            if "ref_s" in rec and name in DISTANCE_RULES:
                rec["ref_s"] += dcost
                rec["ref_extrapolated"] = bool(extrap)
                rec["speedup_vs_ref"] = rec["ref_s"] / rec["new_s"]
            rows.append(rec)
            print(line(rec), flush=True)
    return rows


def time_rule(
    label: str,
    name: str,
    p: dict[str, Any],
    batch: UpdateBatch,
    ctx: DefenseContext,
    f: int,
    d2: torch.Tensor,
    ref: Callable[[], torch.Tensor] | None,
    byz: Any,
    args: Any,
) -> dict[str, Any]:
    """One rule's record: its agreement with ``ref`` and the exact selection, and the median
    seconds of it, ``ref`` and ByzFL's rule, timed in interleaved turns."""
    new = make_defense(name, **p)(batch, ctx)
    iters = geomed_iterations(batch) if name == "geomed" else 100
    kept = exact_kept(name, d2, batch, f) if name in DISTANCE_RULES else None
    ref_delta = ref() if ref is not None else None
    bz = byzfl_rule(byz, name, f, iters, 1e-6) if "weighting" not in p else None
    thunks: dict[str, Callable] = {"new": lambda: make_defense(name, **p)(batch, ctx)}
    if ref is not None:
        thunks["ref"] = ref
    if bz is not None:
        thunks["byzfl"] = lambda: bz(batch.updates)
    times: dict[str, list[float]] = {k: [] for k in thunks}
    for _ in range(args.repeats):  # interleaved turns
        for k, fn in thunks.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    rec: dict[str, Any] = {"defense": label, "f": f, **agreement(new, ref_delta, kept)}
    for k, ts in times.items():
        rec[f"{k}_s"] = statistics.median(ts)
        rec[f"{k}_spread_s"] = max(ts) - min(ts)
    rec["ref_extrapolated"] = False
    if "ref_s" in rec:
        rec["speedup_vs_ref"] = rec["ref_s"] / rec["new_s"]
    if "byzfl_s" in rec:
        rec["speedup_vs_byzfl"] = rec["byzfl_s"] / rec["new_s"]
    if name in ("siren", "sageflow", "fltrust"):
        rec["note"] = "stub context"
    return rec


HEAD = (
    f"{'n':>5} {'model':>5} {'d':>7} {'defense':<19} {'new s':>8} {'ref s':>9} "
    f"{'byzfl s':>8} {'x ref':>7} {'x byzfl':>7} {'same':>5} {'rel err':>8}  note"
)


def line(r: dict[str, Any]) -> str:
    def num(k: str, fmt: str) -> str:
        return format(r[k], fmt) if k in r else "-"

    ref = num("ref_s", ".3f") + ("*" if r.get("ref_extrapolated") else "")
    return (
        f"{r['n']:>5} {r['model']:>5} {r['d']:>7} {r['defense']:<19} {num('new_s', '.3f'):>8} "
        f"{ref:>9} {num('byzfl_s', '.3f'):>8} {num('speedup_vs_ref', '.1f'):>7} "
        f"{num('speedup_vs_byzfl', '.1f'):>7} {str(r.get('same_rows', '-')):>5} "
        f"{num('rel_err', '.1e'):>8}  {r.get('note', '')}"
    )
