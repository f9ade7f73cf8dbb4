"""Training throughput: FedSentry vs Flower's simulation vs a fused reference (the ceiling).

On identical tasks (same clients, model, E, B, learning rate, clients per round) it measures
client-updates/s and samples/s of

* **fedsentry**: the full round loop (selection, placement, Ray device actors or, for a round too
  small to pay for a Ray call, the driver; virtual clock, defense interface, verdicts);
* **flower**: Flower 1.41's simulation engine (Ray backend) running FedAvg with a plain PyTorch
  client, in its fastest tried client-resource setting; on the virtual population each Flower
  client rebuilds its data from its id with FedSentry's own client data source;
* **fused**: the ceiling (``benchmarks/fused.py``): the faster of one process with all threads and
  one process per core with one thread each (plain multiprocessing), training the same clients
  with the same trainer code and no Ray, clock, defense or logging.

Tasks: digits (MLP) and mnist5k (CNN) split over 100 clients, 10 or 100 a round, and a population
of 100,000 virtual clients on digits with 1,000 a round. Start-up and the first (warm-up) rounds
are excluded everywhere; evaluation is not timed.

The code is in ``benchmarks/throughput_study/``: the tasks (``tasks.py``), the measurements
(``core.py``), the table and bar chart (``report.py``) and the command line (``main.py``).

Usage::

    python benchmarks/throughput.py --quick --json t.json
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.throughput_study.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
