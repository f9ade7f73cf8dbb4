"""Start a one-node Ray cluster as ``ray start`` would (its ``ray_current_cluster`` file in
``RAY_TMPDIR``), then run a small simulation four times: with no ``--ray-address``, as is and
with ``RAY_ADDRESS`` naming that cluster; and with ``--ray-address auto``, where ``ray start`` left
the cluster's address and where nothing did (used by tests/test_ray_address.py, in a
subprocess: one Ray per process).

Usage::

    RAY_TMPDIR=/tmp/rtXXXX python tests/foreign_ray.py OUT_DIR

``OUT_DIR/runs.json``: ``[{"rc", "stderr"}, ...]`` for the four runs, whose outputs are
``OUT_DIR/plain``, ``env``, ``auto`` and ``auto-none``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from actors.ray_setup import offline_env  # noqa: E402

RUN = ["--backend", "ray", "--num-actors", "1", "--rounds", "2", "--num-clients", "6"]
RUN += ["--clients-per-round", "3", "--no-progress", "--no-plots"]


def main(out: Path) -> int:
    offline_env()  # before any Ray process starts: the node inherits it
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    empty = out / "no-ray-tmp"  # a Ray temp dir where no `ray start` left its address
    empty.mkdir()
    cases = [
        ("plain", {}, []),
        ("env", {"RAY_ADDRESS": cluster.address}, []),
        ("auto", {}, ["--ray-address", "auto"]),  # the address `ray start` left
        ("auto-none", {"RAY_TMPDIR": str(empty)}, ["--ray-address", "auto"]),
    ]
    runs = []
    try:
        for name, extra, flags in cases:
            try:
                proc = subprocess.run(
                    [sys.executable, "-m", "simulator", *RUN, *flags, "--out", str(out / name)],
                    cwd=ROOT,
                    env={**os.environ, **extra},
                    capture_output=True,
                    text=True,
                    timeout=150,
                )
                runs.append({"rc": proc.returncode, "stderr": proc.stderr})
            except subprocess.TimeoutExpired:
                runs.append({"rc": "timeout", "stderr": ""})
    finally:
        cluster.shutdown()
    (out / "runs.json").write_text(json.dumps(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
