"""Robustness grid: every defense against one attack, over malicious fractions and seeds.

Runs the grid defense x malicious fraction x seed, each cell a full FedSentry run (``backend
local``) in a pool of worker processes, and writes into ``--out`` (default
``runs/robustness-<attack>``):

* ``runs/<attack>-<defense>-f<fraction>-s<seed>/``: each run's events.jsonl, summary.json, ...
  (fraction 0 is the clean baseline, attack ``none``, run once per defense and seed);
* ``results.json`` / ``results.csv``: one record per run (accuracy, detection precision/recall,
  server seconds per round, error);
* ``accuracy_vs_round.png`` (largest fraction, mean over seeds) and ``accuracy_vs_fraction.png``;
* ``grid.yaml``: the resolved settings (scenario overrides, fractions, seeds, defense params).

A cell whose defense precondition cannot hold (Krum needs n > 2f+2, Bulyan n >= 4f+3, trimmed
mean n > 2f, with f = ceil(fraction x clients per round), at least 1), judged on the parameters
the run would use (the preset's with ``--defense-param`` over them), is recorded as
``n/a (precondition)`` without running. A ``--defense-param`` that chooses one of two
alternatives (``bucket`` or the preset's ``nnm``, trimmed mean's ``beta`` or the preset's ``f``)
replaces the preset's other one; parameters that build no rule stop the grid before it starts
(one line, exit 2). A run that fails is recorded with its error (traceback in its run
directory's ``error.txt``); the table and files are still written, then the grid exits 1.

``--resume`` keeps the runs an earlier grid into the same ``--out`` finished and runs only the
others (a grid stopped by a time limit, Ctrl-C or kill -9 goes on where it was).

Usage::

    python benchmarks/robustness.py --attack labelflip
    python benchmarks/robustness.py --attack signflip --quick --defenses fedavg krum median
    python benchmarks/robustness.py --attack labelflip --resume   # after a stop part-way
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.robustness_study.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
