"""Ledger study: what FLChain recording costs a run, how fast the audit is, what it catches.

Without RUN_DIRs, for each task it records the same seeds with and without ``--ledger``,
interleaved (by default the runs of a seed take turns a round at a time in one process, since
this machine's speed drifts in steps lasting seconds; the recorder works only in the ledger
run's turns), and reports the ledger's overhead on the run's time (its rounds and the ledger's
final flush; the median over seeds), how far the recorder ever fell behind, the audit's
throughput, and, with ``--tamper``, a table of tamper cases applied to a recorded run at its
first, middle and last round, each of which the audit must report at its round and client.

Tasks: ``robustness`` (the robustness benchmark's default task: 10 IID digits clients, all of
them every round, E=5, MLP, 30 rounds; multikrum against 20% label flipping, so some rows are
rejected) and ``crossdevice`` (10^6 virtual digits clients, 1,000 a round, E=1, 10 rounds, on
the Ray actor pool). The recorder process is started before the timed runs (as a local Ray is);
its start-up is reported apart (``recorder_start_s``).

With RUN_DIRs it audits those runs only. Writes ``--json`` (and ``results.json`` into
``--out``) and prints the tables.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.ledger_study.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
