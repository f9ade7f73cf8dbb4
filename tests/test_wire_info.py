"""What an algorithm sends instead of a dense update, priced on the wire: uploads sized from
label counts (also for a 10^5-client virtual population) and uploads that are not updates, which
the mask leaves alone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from test_compression import MASK, MakeConfig, run

from simulator.algorithms import ALGORITHMS, Algorithm, WireInfo, register
from simulator.round.engine import Simulation
from simulator.round.wire import label_counts

# ----------------------------------------------------------------------------- wire info


class ClassBytes(Algorithm):
    """Uploads 100 bytes per class its training data holds (a test of ``WireInfo``)."""

    name = "class_bytes_test"

    def wire_bytes(self, w: WireInfo) -> tuple[np.ndarray, np.ndarray]:
        held = (w.label_counts() > 0).sum(1).astype(np.float64)
        return 100.0 * held, np.full(len(w.client_ids), 4.0 * w.shared_size)


@pytest.fixture
def class_bytes() -> Iterator[None]:
    register(ClassBytes)
    yield None
    del ALGORITHMS["class_bytes_test"]


def test_algorithm_sizes_its_uploads_from_label_counts(
    make_config: MakeConfig, class_bytes: None
) -> None:
    recs, sim = run(make_config(rounds=1, algorithm="class_bytes_test", partition="shards"))
    ctx, sel = sim.context(), np.array(recs[0].selected)
    counts = label_counts(ctx, sel)
    for i, c in enumerate(sel.tolist()):  # the counts are the client's own training labels
        y = sim.fed.y_train[sim.train_clients.rows([c]).index[0]]
        assert counts[i].tolist() == np.bincount(y, minlength=10).tolist()
    assert recs[0].to_event()["upload_bytes"] == 100.0 * float((counts > 0).sum())


def test_label_counts_of_virtual_clients_cost_the_cohort(make_config: MakeConfig) -> None:
    cfg = make_config(partition="virtual", num_clients=100_000, rounds=1, **MASK)
    sim = Simulation(cfg)
    try:
        ids = np.array([3, 77_777, 99_999])
        counts = label_counts(sim.context(), ids)
        sizes = sim.train_clients.sizes(ids)
        assert counts.shape == (3, 10) and counts.sum(1).tolist() == sizes.tolist()
    finally:
        sim.close()


class Counts(Algorithm):
    """Each client sends its 10 class counts instead of an update (not a thing to mask)."""

    name = "counts_wire_test"
    upload = "counts"
    reads_rows = True

    def row_entries(self, layout: Any) -> int:
        return 10

    def client_finish(self, f: Any) -> dict[str, torch.Tensor]:
        onehot = torch.nn.functional.one_hot(f.y, 10).to(f.mask.dtype)
        return {"counts": (onehot * f.mask.unsqueeze(-1)).sum((0, 1))}

    def server_update(self, r: Any) -> torch.Tensor:
        return r.global_flat


@pytest.fixture
def counts() -> Iterator[None]:
    register(Counts)
    yield None
    del ALGORITHMS["counts_wire_test"]


def test_uploads_that_are_not_updates_are_not_masked(make_config: MakeConfig, counts: None) -> None:
    up = make_config(algorithm="counts_wire_test", partition="iid", **MASK)
    with pytest.raises(ValueError, match="masks model updates, but algorithm 'counts_wire_te"):
        Simulation(up)
    down = {"rate": 0.25, "direction": "down"}
    cfg = make_config(
        "down",
        algorithm="counts_wire_test",
        partition="iid",
        clients_per_round=10,
        rounds=2,
        compression="mask",
        compression_params=down,
    )
    recs, sim = run(cfg)
    assert [r.to_event()["dense_downloads"] for r in recs] == [10, 0]
