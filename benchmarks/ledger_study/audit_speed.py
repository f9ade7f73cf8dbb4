"""How fast the audit is: recorded runs audited on warmed worker processes."""

from __future__ import annotations

import os
import time
from typing import Any


def _warm(d: str) -> int:
    """Audit ``d`` once, untimed: a fresh process pays its imports, the dataset and py-evm's
    first block once (~1.5 s here), not per run."""
    _audit(d)
    time.sleep(0.3)  # so that every process takes one
    return os.getpid()


def _audit(d: str) -> dict[str, Any]:
    from ledger.audit import audit_run

    rep = audit_run(d)  # on one torch thread
    return {
        "run_dir": d,
        "rounds": rep.rounds,
        "clean": rep.clean,
        "seconds": rep.seconds,
        "findings": [f.line() for f in rep.findings],
    }


def audit_throughput(dirs: list[str], jobs: int) -> dict[str, Any]:
    """Audit ``dirs`` on ``jobs`` started, warmed processes (one run each at a time); rounds a
    second of wall time (process start-up, imports and first-use costs excluded: each process
    audits one run untimed first)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
        list(pool.map(_warm, [dirs[0]] * jobs))
        t0 = time.perf_counter()
        reps = list(pool.map(_audit, dirs))
        wall = time.perf_counter() - t0
    rounds = sum(r["rounds"] for r in reps)
    return {
        "jobs": jobs,
        "cores": os.cpu_count(),
        "runs": len(reps),
        "rounds": rounds,
        "wall_s": wall,
        "rounds_per_s": rounds / wall,
        "audits": reps,
        "clean": all(r["clean"] for r in reps),
    }
