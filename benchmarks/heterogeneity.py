"""Heterogeneity benchmark: does each seed paper's claim reproduce on FedSentry?

Each case (one file in ``benchmarks/heterogeneity_study/cases/``, registered and found
automatically) states a seed's claim, the arms that check it (FedSentry runs, ``backend local``,
small enough for a 2-core CPU) and the comparisons: a method arm against a baseline arm on one
metric, with the direction the seed predicts. Every arm runs for seeds ``0..N-1`` (5 by default,
3 with ``--quick``); runs with identical configs (a baseline that two cases share) run once. The
script prints a table (method and baseline mean +- std over seeds, the paired difference, the
p-value, the verdict, the one-standard-deviation rule and the seeds won) and writes into
``--out`` (default ``runs/heterogeneity``) the runs (``runs/<case>/<arm>-s<seed>/``) and one
plot per case (``<case>.png``: accuracy vs round, mean over seeds with a +-1 std band, one
panel per group of arms that the comparisons connect; the per-client mean accuracy for cases
compared on per-client metrics).

Verdict: the arms of a seed share its partition, so each comparison is paired by seed. With
``d_i`` the method's metric minus the baseline's on seed ``i`` (negated when the seed predicts
*lower*), ``p`` is the one-sided exact sign-flip permutation p-value: the share of the ``2^n``
sign patterns of the ``d_i`` whose mean is at least the observed mean (observed included).
**reproduced** when ``p <= 0.05``; **inconclusive** when ``mean(d) > 0`` but ``p > 0.05``;
**contradicted** otherwise; **failed** when a run failed. The smallest possible ``p`` is
``1/2^n``: 1/8 with ``--quick``'s 3 seeds, so a quick verdict is at best "inconclusive"; the
full run's 5 seeds reach 1/32. Beside it, the older rule (``reproduced`` in the JSON: the gain
of the means exceeds the larger of the two standard deviations over seeds) and ``wins``.

Usage::

    python benchmarks/heterogeneity.py --quick                  # every case, 3 seeds
    python benchmarks/heterogeneity.py --case fedbn --case scaffold --json out.json
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.heterogeneity_study.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
