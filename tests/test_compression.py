"""Masked compression and bytes on the wire: the masks and their prices on 5-entry vectors by
hand, the clock's transfer time of a masked upload, a round's byte totals, and the runs that
must not change under compression (vectorized vs sequential, resume, fedbuff, the ledger)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from simulator.compression import make_compressor
from simulator.compression.base import Compressor, kept_entries, sparse_bytes
from simulator.compression.mask import Mask, keep_top, mask_update
from simulator.config.fields import ConfigError
from simulator.config.sections import Config
from simulator.population.clock import compute_seconds, transfer_seconds
from simulator.round.engine import Simulation
from simulator.round.types import RoundRecord
from simulator.run.experiment import resume_config, run_experiment
from simulator.run.output import read_events, summarize

MakeConfig = Callable[..., Config]

# a 5-entry update and the global model it was trained from; trained weights = BASE + UPDATE
# = [1.5, -1.9, 4.1, 0.5, 1.7]
UPDATE = torch.tensor([0.5, -2.0, 0.1, 1.0, -0.3])
BASE = torch.tensor([1.0, 0.1, 4.0, -0.5, 2.0])
MASK = {"compression": "mask", "compression_params": {"rate": 0.25}}
WALL = ("wall_time", "slowest_train_seconds", "chunks", "placement")


# ----------------------------------------------------------------------------- by hand


@pytest.mark.parametrize(
    "kind, expected",
    [
        # |d| = [.5, 2, .1, 1, .3]: the two largest are entries 1 and 3
        ("magnitude", [0.0, -2.0, 0.0, 1.0, 0.0]),
        # |d * w| = [.75, 3.8, .41, .5, .51]: entries 1 and 0
        ("gw", [0.5, -2.0, 0.0, 0.0, 0.0]),
    ],
)
def test_upload_mask_keeps_the_most_important_entries(kind: str, expected: list[float]) -> None:
    k = int(kept_entries(0.4, 5))  # ceil(0.4 * 5) = 2
    assert k == 2
    sent = Mask(rate=0.4, importance=kind).compress_rows(UPDATE[None], BASE, torch.tensor([k]))
    assert sent[0].tolist() == expected


def test_ties_go_to_the_lower_index_and_rows_keep_their_own_k() -> None:
    assert keep_top(torch.tensor([1.0, 1.0, 1.0, 0.0]), torch.tensor(2)).tolist() == [
        True,
        True,
        False,
        False,
    ]
    rows = torch.stack([UPDATE, -UPDATE, UPDATE * 0.5])
    keep = torch.tensor([1, 2, 3])
    sent = Mask(rate=0.4, importance="gw").compress_rows(rows, BASE, keep)
    for i in range(3):  # the vmapped rows are the one-client function's rows
        assert torch.equal(sent[i], mask_update(rows[i], BASE, keep[i], "gw"))
    assert (sent != 0).sum(1).tolist() == [1, 2, 3]


def test_sparse_transfer_bytes_by_hand() -> None:
    # 2 of 5 entries: pairs 2 * 8 = 16, bitmap ceil(5 / 8) + 2 * 4 = 9, dense 20 -> 9
    assert sparse_bytes(2, 5) == 9.0
    assert sparse_bytes(10, 1000) == 80.0  # pairs 80 < bitmap 125 + 40
    assert sparse_bytes(250, 1000) == 1125.0  # bitmap 125 + 1000 < pairs 2000
    assert sparse_bytes(5, 5) == 20.0  # dense 20 < bitmap 21 < pairs 40
    assert int(kept_entries(0.07, 100)) == 7  # 0.07 * 100 is 7.000000000000001 in floats
    m = Mask(rate=0.4)
    np.testing.assert_array_equal(m.upload_bytes(np.array([20.0]), 5), [9.0])
    # 8 bytes of extras beyond the 5-entry row travel dense: 9 + 8
    np.testing.assert_array_equal(m.upload_bytes(np.array([28.0]), 5), [17.0])
    np.testing.assert_array_equal(m.upload_entries(np.array([20.0, 28.0]), 5), [2, 2])
    holds = np.array([True, False])  # the second client never downloaded: the whole model
    np.testing.assert_array_equal(m.download_bytes(np.array([20.0, 20.0]), 5, holds), [9, 20])
    up_only, down_only, none = Mask(0.4, direction="up"), Mask(0.4, direction="down"), Compressor()
    np.testing.assert_array_equal(up_only.download_bytes(np.array([20.0]), 5, holds[:1]), [20])
    np.testing.assert_array_equal(down_only.upload_bytes(np.array([20.0]), 5), [20.0])
    np.testing.assert_array_equal(none.upload_bytes(np.array([20.0]), 5), [20.0])


def test_clock_transfer_time_of_a_masked_upload() -> None:
    up = float(Mask(rate=0.4).upload_bytes(np.array([20.0]), 5)[0])  # 9 bytes
    # down: 20 B = 0.16 kbit at 0.08 kbit/s = 2 s; up: 9 B = 0.072 kbit at 0.036 kbit/s = 2 s;
    # two latencies of 100 ms
    t = transfer_seconds(20.0, up, up_kbps=0.036, down_kbps=0.08, latency_ms=100.0)
    assert t == pytest.approx(4.2, rel=1e-12)
    dense = transfer_seconds(20.0, 20.0, up_kbps=0.036, down_kbps=0.08, latency_ms=100.0)
    assert dense == pytest.approx(2.0 + 0.16 / 0.036 + 0.2, rel=1e-12)


@pytest.mark.parametrize(
    "kind, moved", [("magnitude", [False, True, False, True, False]), ("gw", [1, 1, 0, 0, 0])]
)
def test_download_applies_only_the_change_it_sends(kind: str, moved: list[Any]) -> None:
    new = BASE + UPDATE  # the algorithm's server update moved the model by UPDATE
    got = Mask(rate=0.4, importance=kind).downlink(BASE, new)
    expected = torch.where(torch.tensor(moved, dtype=torch.bool), new, BASE)
    assert torch.equal(got, expected)
    assert torch.equal(Mask(rate=0.4, direction="up").downlink(BASE, new), new)


def test_bad_settings_fail_in_one_line(make_config: MakeConfig) -> None:
    with pytest.raises(ConfigError, match=r"compression.compression: unknown value 'zip'; valid"):
        make_config(compression="zip")
    with pytest.raises(ConfigError, match=r"compression_params: .*rate must be in \(0, 1\]"):
        make_config(compression="mask", compression_params={"rate": 1.5})
    with pytest.raises(ConfigError, match=r"importance must be one of \['magnitude', 'gw'\]"):
        make_config(compression="mask", compression_params={"importance": "hessian"})
    with pytest.raises(ConfigError, match=r"direction must be one of \['up', 'down', 'both'\]"):
        make_config(compression="mask", compression_params={"direction": "sideways"})
    with pytest.raises(
        ValueError, match=r"compression 'mask': unknown parameter 'k'; valid: \['dir"
    ):
        make_compressor("mask", k=3)


# ----------------------------------------------------------------------------- in a run


class RowsSeen:
    """Keeps each round's rows as the round-end hooks get them (``Simulation.run`` lets go of
    them afterwards); no ``needs_rows``: it must not change whether the actors pre-aggregate."""

    def __init__(self) -> None:
        self.rows: dict[int, Any] = {}

    def on_round_end(self, sim: Simulation, record: RoundRecord) -> None:
        self.rows[record.round] = record.rows


def run(cfg: Config) -> tuple[list[RoundRecord], Simulation]:
    seen = RowsSeen()
    sim = Simulation(cfg, [seen])
    try:
        recs = sim.run()
    finally:
        sim.close()
    for r in recs:
        r.rows = seen.rows[r.round]
    return recs, sim


def sparse_of(size: int) -> float:
    """Bytes of a rate-0.25 masked vector of ``size`` entries (bitmap + values)."""
    return math.ceil(size / 8) + 4 * math.ceil(size / 4)


def test_round_byte_totals_and_arrival_times_by_hand(make_config: MakeConfig) -> None:
    recs, sim = run(make_config(rounds=2, clients_per_round=10, **MASK))
    s = sim.space.size
    dense, sparse = 4.0 * s, float(sparse_of(s))
    e0, e1 = (r.to_event() for r in recs)
    assert e0["upload_bytes"] == 10 * sparse and e0["upload_bytes_uncompressed"] == 10 * dense
    # round 0: nobody holds a model yet, every download is the whole model
    assert e0["download_bytes"] == 10 * dense and e0["dense_downloads"] == 10
    # round 1: every client downloaded round 0's model, so it gets the masked change
    assert e1["download_bytes"] == 10 * sparse and e1["dense_downloads"] == 0
    assert e1["download_bytes_uncompressed"] == 10 * dense
    # the round ends when the slowest client's compute, dense download and masked upload are
    # done (wait_for_all)
    fed, sel = sim.fed, np.array(e0["selected"])
    pop = fed.population
    dur = compute_seconds(
        fed.client_sizes[sel], 1, pop.compute_ms_per_sample[sel], 3.0
    ) + transfer_seconds(
        dense,
        sparse,
        up_kbps=pop.up_kbps[sel],
        down_kbps=pop.down_kbps[sel],
        latency_ms=pop.latency_ms[sel],
    )
    assert e0["virtual_time"] == pytest.approx(float(np.max(dur)), rel=1e-12)
    # the defense saw the rows as sent: at most k = ceil(s / 4) entries each, and kept rows
    # (no pre-aggregation on the actors while rows are compressed)
    k = math.ceil(s / 4)
    assert recs[0].rows is not None
    assert int((recs[0].rows.updates != 0).sum(1).max()) <= k
    summary = summarize([r.to_event() for r in recs])
    assert summary["total_upload_bytes"] == 20 * sparse
    assert summary["upload_volume"] == pytest.approx(sparse / dense)
    assert summary["download_volume"] == pytest.approx((10 * dense + 10 * sparse) / (20 * dense))


def test_without_compression_bytes_are_dense_and_rows_preaggregated(
    make_config: MakeConfig,
) -> None:
    recs, sim = run(make_config(rounds=1))
    e = recs[0].to_event()
    assert e["upload_bytes"] == e["download_bytes"] == 4 * 4.0 * sim.space.size
    assert recs[0].rows is None  # FedAvg's partial sums on the workers, as before


def test_only_clients_that_hold_the_previous_model_get_a_masked_download(
    make_config: MakeConfig,
) -> None:
    params = {"rate": 0.25, "direction": "down"}
    recs, sim = run(make_config(rounds=4, compression="mask", compression_params=params))
    dense, sparse = 4.0 * sim.space.size, float(sparse_of(sim.space.size))
    prev: set[int] = set()
    for r in recs:
        e = r.to_event()
        fresh = len(set(r.selected) - prev)  # not selected last round: no model to patch
        assert e["dense_downloads"] == fresh
        assert e["download_bytes"] == fresh * dense + (len(r.selected) - fresh) * sparse
        assert e["upload_bytes"] == e["upload_bytes_uncompressed"] == 4 * dense
        prev = set(r.selected)
    assert any(0 < r.to_event()["dense_downloads"] < 4 for r in recs)


def test_vectorized_and_sequential_agree(make_config: MakeConfig) -> None:
    gw = {"compression": "mask", "compression_params": {"rate": 0.25, "importance": "gw"}}
    out = {}
    for vec in (True, False):
        recs, sim = run(make_config(f"v{vec}", rounds=3, vectorize=vec, inline="never", **gw))
        out[vec] = (sim.global_flat, [r.to_event()["upload_bytes"] for r in recs])
    assert (out[True][0] - out[False][0]).abs().max() < 1e-5
    assert out[True][1] == out[False][1]


@pytest.mark.parametrize("policy", ["fedbuff", "deadline_carryover"])
def test_async_and_carried_updates_are_counted_once(make_config: MakeConfig, policy: str) -> None:
    params = {"k": 2, "concurrency": 4} if policy == "fedbuff" else {"deadline_s": 3.0}
    cfg = make_config(rounds=6, round_policy=policy, policy_params=params, **MASK)
    recs, sim = run(cfg)
    dense, sparse = 4.0 * sim.space.size, float(sparse_of(sim.space.size))
    events = [r.to_event() for r in recs]
    assert any(e["stale"] for e in events)  # updates landed rounds after they were trained
    for e in events:  # each update priced in the round it lands, never where it trained
        assert e["upload_bytes"] == e["aggregated"] * sparse
        assert e["upload_bytes_uncompressed"] == e["aggregated"] * dense
    for r in recs:
        if r.rows is not None and len(r.rows.client_ids):
            assert int((r.rows.updates != 0).sum(1).max()) <= math.ceil(sim.space.size / 4)


def test_resume_is_bitwise_identical(make_config: MakeConfig) -> None:
    both = {"compression": "mask", "compression_params": {"rate": 0.25, "importance": "gw"}}
    overrides = {"rounds": 5, "checkpoint_every": 2, **both}
    crashed = make_config("crashed", **overrides)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(crashed, crash_after=3)
    out = Path(crashed.output.out)
    summary = run_experiment(resume_config(out))
    full = make_config("full", **overrides)
    reference = run_experiment(full)
    strip = lambda ev: [{k: v for k, v in e.items() if k not in WALL} for e in ev]  # noqa: E731
    resumed = read_events(out / "events.jsonl")
    assert strip(resumed) == strip(read_events(Path(full.output.out) / "events.jsonl"))
    assert 0 < sum(e["dense_downloads"] for e in resumed[2:]) < 4 * 3  # held models survived
    for k in ("final_accuracy", "total_upload_bytes", "total_download_bytes", "virtual_time"):
        assert summary[k] == reference[k]


def test_ledger_records_the_sent_rows_and_audits_clean(make_config: MakeConfig) -> None:
    from ledger.audit import audit_run

    cfg = make_config(
        "ledger",
        rounds=3,
        ledger=True,
        committee=1,
        defense="trimmedmean",
        defense_params={"f": 1},
        compression="mask",
        compression_params={"rate": 0.25, "importance": "gw"},
    )
    run_experiment(cfg)
    assert audit_run(Path(cfg.output.out), bls=False).clean
