"""Lose a Ray cluster's node, then the whole cluster, under running simulations (used by
tests/test_lost_cluster.py, in a subprocess: one Ray per process).

Usage::

    RAY_TMPDIR=/tmp/rtXXXX python tests/lost_cluster.py OUT_DIR

1. ``node``: a head and a second node (1 CPU each), a run of 2 actors; the second node is
   removed after round 3: no node is left for a replacement actor. Then ``--resume`` with the
   ``--num-actors`` the error names, on what is left.
2. ``cluster``: the same cluster shut down after round 3.

``OUT_DIR/lost.json``: ``{"node": {"rc", "stderr", "seconds"}, "resume": {...},
"cluster": {...}}``; the runs write under ``OUT_DIR/<name>``.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from actors.ray_setup import offline_env  # noqa: E402

RUN = ["--rounds", "40", "--num-clients", "10", "--clients-per-round", "4", "--inline", "never"]
RUN += ["--checkpoint-every", "1", "--no-progress", "--no-plots", "--seed", "1"]


def _after_rounds(proc: subprocess.Popen[str], events: Path, k: int) -> None:
    while proc.poll() is None:
        if events.is_file() and len(events.read_bytes().splitlines()) >= k:
            return
        time.sleep(0.05)


def _run(argv: list[str], lose: object = None, events: Path | None = None) -> dict[str, object]:
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "simulator", *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if lose is not None and events is not None:
        _after_rounds(proc, events, 3)
        t0 = time.monotonic()
        lose()  # type: ignore[operator]
    try:
        _, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return {"rc": proc.returncode, "stderr": err, "seconds": time.monotonic() - t0}


def main(out: Path) -> int:
    offline_env()  # before any Ray process starts: the nodes inherit it
    from ray.cluster_utils import Cluster

    found: dict[str, object] = {}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    second = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        run = out / "node"
        argv = [*RUN, "--ray-address", cluster.address, "--num-actors", "2", "--out", str(run)]
        found["node"] = _run(argv, lambda: cluster.remove_node(second), run / "events.jsonl")
        line = str(found["node"]["stderr"]).strip().splitlines()[-1]  # type: ignore[index]
        resume = shlex.split(line.partition("resume with: ")[2])
        found["resume"] = _run(resume[resume.index("simulator") + 1 :])
    finally:
        cluster.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        run = out / "cluster"
        argv = [*RUN, "--ray-address", cluster.address, "--num-actors", "2", "--out", str(run)]
        found["cluster"] = _run(argv, cluster.shutdown, run / "events.jsonl")
    finally:
        cluster.shutdown()
    (out / "lost.json").write_text(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
