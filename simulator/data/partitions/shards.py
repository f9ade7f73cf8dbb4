"""``shards``: pathological non-IID, single-class shards.

References
----------
.. [1] B. McMahan et al., "Communication-Efficient Learning of Deep Networks from
   Decentralized Data", AISTATS 2017.
"""

from __future__ import annotations

import numpy as np

from simulator.data.partitions import PARTITIONS


@PARTITIONS.register("shards")
def shards(
    labels: np.ndarray,
    num_clients: int,
    *,
    seed: int,
    groups: np.ndarray | None,
    classes_per_client: int = 2,
) -> list[np.ndarray]:
    """Pathological non-IID [1]_: label-sorted shards, ``classes_per_client`` per client.

    Every shard holds a single class (each class is cut into a number of shards proportional
    to its size) and a client's shards are drawn at random, so a client sees *at most*
    ``classes_per_client`` classes (two of its shards can be of one class), as in [1]_.
    """
    rng = np.random.default_rng(seed)
    k = classes_per_client
    if k < 1:
        raise ValueError(f"shards classes_per_client must be >= 1, got {k}")
    classes, inverse = np.unique(labels, return_inverse=True)
    if k > len(classes):
        raise ValueError(
            f"shards classes_per_client ({k}) exceeds the {len(classes)} classes of the data"
        )
    per_class = np.bincount(inverse, minlength=len(classes))
    num_shards = num_clients * k
    if num_shards < len(classes):
        raise ValueError(
            f"shards needs num_clients * classes_per_client >= number of classes "
            f"({num_clients} * {k} < {len(classes)}): single-class shards could "
            f"not cover every sample"
        )
    if num_shards > len(labels):
        raise ValueError(f"cannot cut {len(labels)} samples into {num_shards} shards")
    # D'Hondt allocation: each extra shard goes to the class whose shards are largest
    shard_count = np.ones(len(classes), dtype=np.int64)
    for _ in range(num_shards - len(classes)):
        ratio = np.where(shard_count < per_class, per_class / shard_count, -1.0)
        shard_count[int(np.argmax(ratio))] += 1
    shards: list[np.ndarray] = []
    for c, s in enumerate(shard_count):
        shards.extend(np.array_split(rng.permutation(np.flatnonzero(inverse == c)), s))
    order = rng.permutation(num_shards)
    return [
        np.concatenate([shards[j] for j in order[i * k : (i + 1) * k]]) for i in range(num_clients)
    ]
