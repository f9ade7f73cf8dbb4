"""Run one study on a two-node Ray cluster, then on a one-node local Ray (used by
tests/test_two_node.py; one Ray per process, so the test runs this file in a subprocess).

Usage::

    RAY_TMPDIR=/tmp/rtXXXX python tests/two_node_study.py OUT_DIR MODULE [ARG ...]

``MODULE [ARG ...]`` is a ``python -m`` command line (e.g. ``simulator --rounds 3 ...``); it is
run twice in this process, as ``python -m`` would run it: first with ``--ray-address`` of a
:class:`ray.cluster_utils.Cluster` started here (a head node and a second node, one CPU each) and
``--out OUT_DIR/two_node``, then, after that cluster is shut down, on a local one-node Ray of two
CPUs with ``--out OUT_DIR/one_node``. The cluster's node ids (head first) go to
``OUT_DIR/cluster_nodes.json``. Exit status: the first non-zero status of the two runs, else 0.

``RAY_TMPDIR`` (a short path: Ray's socket paths must stay short) keeps the cluster's sessions
and its ``ray_current_cluster`` file away from ``/tmp/ray``, where another process's plain
``ray.init()`` would otherwise find this cluster and join it.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actors.ray_setup import ensure_ray, offline_env  # noqa: E402

NODE_STORE_BYTES = 100 * 1024 * 1024  # each node's object store


def run_module(argv: list[str]) -> int:
    """Run ``python -m argv[0] argv[1:]`` in this process; its exit status."""
    saved = sys.argv
    sys.argv = [argv[0], *argv[1:]]
    try:
        runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        sys.argv = saved
    return 0


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: two_node_study.py OUT_DIR MODULE [ARG ...]", file=sys.stderr)
        return 2
    if not os.environ.get("RAY_TMPDIR"):
        print("two_node_study.py: set RAY_TMPDIR to a short private directory", file=sys.stderr)
        return 2
    out, study = Path(argv[0]), argv[1:]
    out.mkdir(parents=True, exist_ok=True)
    offline_env()  # before any Ray process starts: the nodes inherit it
    import ray
    from ray.cluster_utils import Cluster

    node_args = {"num_cpus": 1, "object_store_memory": NODE_STORE_BYTES, "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=node_args)
    try:
        second = cluster.add_node(**node_args)
        cluster.wait_for_nodes()
        ids = [cluster.head_node.node_id, second.node_id]
        (out / "cluster_nodes.json").write_text(json.dumps(ids))
        rc = run_module([*study, "--ray-address", cluster.address, "--out", str(out / "two_node")])
    finally:
        ray.shutdown()  # the driver leaves first: Ray refuses to remove the node it is on
        cluster.shutdown()
    if rc:
        return rc
    ensure_ray(num_cpus=2, object_store_mb=NODE_STORE_BYTES // 2**20)  # the CLI reuses it
    try:
        return run_module([*study, "--out", str(out / "one_node")])
    finally:
        ray.shutdown()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
