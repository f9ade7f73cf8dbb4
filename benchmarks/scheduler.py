"""Scheduler benchmark (issue 11): placement search on standard instances, chunk-time prediction
on FedSentry's own chunks, and live rounds under each placement.

Parts (``--parts``, comma-separated; default all three):

* ``instances``: Braun et al.'s 12 ETC classes at 512 tasks x 16 machines and a 10,000 x 64
  instance; every method's makespan beside the LP lower bound, and its run time
  (:mod:`benchmarks.scheduler_study.instances`; GA 10 s per class, 60 s on the large one;
  ``--quick``: 1 s and 10 s).
* ``predictor``: GBDT and Parrot's linear fit trained on the chunks of the first ~70% of the
  recorded runs' rounds, MAPE on the rest; decision regret of ``ga`` placing held-out rounds with
  the learned cost, judged by an oracle fitted on all chunks, since the true time of a schedule
  that never ran is unknown (:mod:`benchmarks.scheduler_study.predictor`).
* ``live``: 200 quantity-skewed clients a round (virtual clients, log-normal sizes, median 20
  samples) of the mnist5k CNN and of the digits MLP on 2 Ray actors, every round trained on the
  actors; per placement the training wall time of rounds 1.. (round 0 calibrates the predictor),
  placements interleaved in repeats on one federation and actor pool per task
  (:mod:`benchmarks.scheduler_study.live`); ``--placements`` picks them (default greedy, ga and the
  default placement, lpt, marked ``*``). Checks: ga <= 1.02 x greedy on both tasks, <= 0.80 x on
  cnn; the default placement <= 1.02 x greedy on both tasks.

The predictor reuses the live runs' chunks and adds a ``ga`` run with the linear predictor
(``--quick``: the live runs only). Writes ``--json`` (exactly ``{"instances": [...],
"predictor": {...}, "live": [...]}``; a part not run is empty) and, in ``--out``:
``results.json``, ``settings.json`` (settings, checks, wall time), ``live.csv``,
``instances.csv``, ``scheduler.png`` and every run's ``events/<task>-<label>-r<repeat>.jsonl``.

Usage::

    python benchmarks/scheduler.py --json s.json              # about 12 minutes on 2 cores
    python benchmarks/scheduler.py --quick --json q.json      # about 2.5 minutes
    python benchmarks/scheduler.py --parts live --actor-kinds gpu=device=gpu,gpus=0.5 \\
        --actor-kinds cpu=count=1
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.scheduler_study.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
