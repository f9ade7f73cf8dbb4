"""Start a pool of two actor kinds on a two-node Ray cluster whose nodes differ in size, and
write where each actor runs (used by tests/test_pool_pinning.py, in a subprocess: one Ray per
process).

Usage::

    RAY_TMPDIR=/tmp/rtXXXX python tests/pinning_cluster.py OUT.json

The head node has 2 CPUs, the second 1; kind ``a`` is one 1-CPU actor, kind ``b`` one 2-CPU
actor. The only packing is ``a`` on the second node and ``b`` on the head. Ray alone, placing the
actors one after another, puts ``a`` on the head (the driver's node), where it leaves 1 CPU, and
``b`` then waits for a node with 2 free CPUs that never comes; the pool pins each actor to the
node the packing gives it. ``START_WAIT_S`` is cut to 30 s so that a regression fails quickly.
OUT.json: ``{"head", "second", "nodes" (per actor), "kinds" (per actor)}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actors.ray_setup import offline_env  # noqa: E402


def main(out: Path) -> int:
    offline_env()  # before any Ray process starts: the nodes inherit it
    import numpy as np
    import ray
    from ray.cluster_utils import Cluster

    import actors.startup
    from actors.kinds import parse_actor_kinds
    from actors.pool import RayPool
    from simulator.data.clients import PartitionData
    from simulator.training.models import ModelSpec

    actors.startup.START_WAIT_S = 30.0
    args = {"object_store_memory": 80 * 2**20, "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args={**args, "num_cpus": 2})
    try:
        second = cluster.add_node(**args, num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
        kinds = parse_actor_kinds({"a": "threads=1", "b": "threads=2"})
        pool = RayPool(
            ModelSpec("mlp", (4,), 2, hidden=4),
            np.zeros((4, 4), np.float32),
            np.array([0, 1, 0, 1]),
            PartitionData.from_lists([np.arange(4)]),
            0,
            kinds=kinds,
        )
        out.write_text(
            json.dumps(
                {
                    "head": cluster.head_node.node_id,
                    "second": second.node_id,
                    "nodes": pool.actor_nodes(),
                    "kinds": pool.kinds(),
                }
            )
        )
        pool.shutdown()
    finally:
        ray.shutdown()  # the driver leaves first: Ray refuses to remove the node it is on
        cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
