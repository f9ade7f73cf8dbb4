"""Placement search on standard instances: every method's makespan / the LP lower bound.

Instances: Braun et al.'s 12 ETC classes at 512 tasks x 16 machines and one 10,000 x 64
instance (``simulator.scheduler.instances``). For each, the Lenstra-Shmoys-Tardos LP bound and,
per method (``ga``, ``lpt``, ``minmin``, ``sufferage``, ``round_robin``), the makespan and the run
time. The GA gets ``--seconds`` per 512 x 16 instance and ``--large-seconds`` for the big one.

Usage::

    python -m benchmarks.scheduler_study.instances --json s.json    # 12 x 10 s + 60 s
    python -m benchmarks.scheduler_study.instances --quick          # 12 x 1 s + 10 s

(``benchmarks/scheduler.py --parts instances`` runs the same as part of the scheduler study.)

JSON: ``{"instances": [{"name", "tasks", "machines", "lp_bound", "makespan": {method: ..},
"seconds": {method: ..}}]}`` with absolute makespans (divide by ``lp_bound`` for the ratio).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from simulator.scheduler import METHOD_NAMES, lst_bound, makespan, schedule
from simulator.scheduler.instances import large_instance, standard_instances


def measure(name: str, etc: np.ndarray, seconds: float, seed: int) -> dict[str, object]:
    """One instance's record: LP bound, and every method's makespan and run time."""
    spans: dict[str, float] = {}
    times: dict[str, float] = {}
    for method in METHOD_NAMES:
        t0 = time.perf_counter()
        assign = schedule(method, etc, seed=seed, seconds=seconds)
        times[method] = time.perf_counter() - t0
        spans[method] = makespan(etc, assign)
    return {
        "name": name,
        "tasks": int(etc.shape[0]),
        "machines": int(etc.shape[1]),
        "lp_bound": lst_bound(etc, upper=min(spans.values())),
        "makespan": spans,
        "seconds": times,
    }


def table(records: list[dict[str, object]]) -> str:
    """A text table of makespan / LP bound (and seconds) per instance and method."""
    head = f"{'instance':<14}{'tasks':>6}{'mach':>5}{'lp_bound':>12}" + "".join(
        f"{m:>18}" for m in METHOD_NAMES
    )
    lines = [head, "-" * len(head)]
    ratios: dict[str, list[float]] = {m: [] for m in METHOD_NAMES}
    for r in records:
        bound = float(r["lp_bound"])  # type: ignore[arg-type]
        cells = []
        for m in METHOD_NAMES:
            ratio = r["makespan"][m] / bound  # type: ignore[index]
            if r["tasks"] == 512:
                ratios[m].append(ratio)
            cells.append(f"{ratio:>9.4f} ({r['seconds'][m]:5.2f}s)")  # type: ignore[index]
        lines.append(
            f"{r['name']:<14}{r['tasks']:>6}{r['machines']:>5}{bound:>12.6g}"
            + "".join(f"{c:>18}" for c in cells)
        )
    if ratios[METHOD_NAMES[0]]:
        lines.append(
            f"{'mean 512x16':<37}"
            + "".join(f"{np.mean(ratios[m]):>9.4f}{'':9}" for m in METHOD_NAMES)
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the instances; print the table; write ``--json``. Returns the exit code."""
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.scheduler_study.instances", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--quick", action="store_true", help="GA 1 s per class, 10 s on the large")
    ap.add_argument("--seconds", type=float, default=10.0, help="GA budget at 512 x 16")
    ap.add_argument("--large-seconds", type=float, default=60.0, help="GA budget at 10,000 x 64")
    ap.add_argument("--no-large", action="store_true", help="skip the 10,000 x 64 instance")
    ap.add_argument("--classes", nargs="*", help="only these Braun classes (default: all 12)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    seconds, large_seconds = (1.0, 10.0) if args.quick else (args.seconds, args.large_seconds)
    if seconds < 0 or large_seconds < 0:
        print("error: --seconds and --large-seconds must be >= 0", file=sys.stderr)
        return 2
    instances = standard_instances(args.seed)
    if args.classes is not None:
        unknown = [c for c in args.classes if c not in instances]
        if unknown:
            print(
                f"error: unknown class {unknown[0]!r}; valid: {sorted(instances)}", file=sys.stderr
            )
            return 2
        instances = {c: instances[c] for c in args.classes}
    records = [measure(name, etc, seconds, args.seed) for name, etc in instances.items()]
    if not args.no_large:
        records.append(
            measure("large_i_hihi", large_instance(seed=args.seed), large_seconds, args.seed)
        )
    print(table(records))
    if args.json is not None:
        args.json.write_text(json.dumps({"instances": records}, indent=2))
    return 0


def instance_checks(records: list[dict[str, Any]]) -> list[str]:
    """Acceptance lines of the instances: GA mean <= 1.02 x LP at 512 x 16, <= 1.03 x at
    10,000 x 64, never worse than Min-Min."""

    def ok(cond: bool) -> str:
        return "[ok]" if cond else "[NO]"

    small = [r["makespan"]["ga"] / r["lp_bound"] for r in records if r["tasks"] == 512]
    large = [r["makespan"]["ga"] / r["lp_bound"] for r in records if r["tasks"] == 10_000]
    lines = []
    if small:
        mean = sum(small) / len(small)
        lines.append(
            f"{ok(mean <= 1.02)} ga mean makespan / LP over {len(small)} classes at "
            f"512x16 = {mean:.4f} <= 1.02"
        )
    if large:
        lines.append(f"{ok(large[0] <= 1.03)} ga / LP at 10000x64 = {large[0]:.4f} <= 1.03")
    worse = [r["name"] for r in records if r["makespan"]["ga"] > r["makespan"]["minmin"]]
    lines.append(
        f"{ok(not worse)} ga never worse than minmin ({len(records) - len(worse)}/"
        f"{len(records)} instances)"
    )
    return lines


if __name__ == "__main__":
    sys.exit(main())
