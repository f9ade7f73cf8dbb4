"""Straggler study: round policies x seeds (x attack fraction) on a large device population.

Every cell is one FedSentry run on the virtual clock, all of them given the same budget of
virtual time (``--virtual-hours``): synchronous policies (wait_for_all, deadline,
deadline_carryover, first_k, overcommit) and asynchronous ones (fedbuff, fedasync, where a "round"
is a server step). Devices are 10^5 by default (virtual clients of the digits set, engine v2),
with FedScale-style log-normal speeds, the diurnal availability model (or ``--availability-trace``)
and mid-training dropout. For each policy it reports time-to-accuracy (virtual hours to reach 0.8
and 0.9 of the best policy's final accuracy), accuracy vs virtual time and vs round, round
durations, the share of stale updates, wasted compute (device-seconds trained but discarded), the
participation histogram and its Gini coefficient, and the accuracy of the final model on the data
of the slowest device quartile vs the fastest.

Writes into ``--out`` (default ``runs/stragglers``): ``results.json`` / ``results.csv`` (one record
per run), ``runs/<policy>-s<seed>[-f<fraction>]/events.jsonl``, ``study.yaml`` (the resolved
settings) and PNG plots. ``--scenario`` runs the fidelity cases of the seeds' papers instead
(see :mod:`benchmarks.straggler_study.scenarios`).

Usage::

    python benchmarks/stragglers.py                      # 10^5 devices, 7 policies x 2 seeds
    python benchmarks/stragglers.py --quick --json q.json
    python benchmarks/stragglers.py --population 1000000 --policies fedbuff --rounds 20 \\
        --clients-per-round 1000 --seeds 1
    python benchmarks/stragglers.py --scenario sageflow
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.straggler_study.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
