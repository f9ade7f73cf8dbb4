"""Heterogeneity benchmark: does each seed paper's claim reproduce on FedSentry?

Each case (one file in ``benchmarks/heterogeneity_study/cases/``, registered and found
automatically) states a seed's claim, the arms that check it (FedSentry runs, ``backend local``,
small enough for a 2-core CPU) and the comparisons: a method arm against a baseline arm on one
metric, with the direction the seed predicts. Every arm runs for seeds ``0..N-1``; runs with
identical configs (a baseline that two cases share) run once. The script prints a table (method
and baseline mean +- std over seeds, the seed's predicted direction and our verdict) and writes
into ``--out`` (default ``runs/heterogeneity``) the runs (``runs/<case>/<arm>-s<seed>/``) and
one plot per case (``<case>.png``: accuracy vs round, mean over seeds with a +-1 std band, one
panel per group of arms that the comparisons connect; the per-client mean accuracy for cases
compared on per-client metrics).

Verdict: with ``m``, ``b`` the method's and the baseline's means over seeds and ``s_m``, ``s_b``
their sample standard deviations (ddof 1), ``d = m - b`` when the seed predicts *higher*
(``b - m`` for *lower*); **reproduced** when ``d > max(s_m, s_b)``, else **not reproduced**
(also when a run failed).

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
