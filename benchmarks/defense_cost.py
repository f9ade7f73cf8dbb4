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

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.defense_cost_study.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
