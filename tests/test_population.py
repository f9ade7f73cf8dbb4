"""Devices and data separated; per-round cost that follows the cohort: selection, virtual
clients, the memory budget, traces longer than the population, per-client evaluation."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from simulator.config.fields import ConfigError
from simulator.config.sections import build_config
from simulator.population.generate import generate_population_arrays
from simulator.population.selection import FULL_PASS_MAX, select_clients
from simulator.round.engine import Simulation

SMALL = {
    "backend": "local",
    "dataset": "digits",
    "hidden": 16,
    "local_epochs": 1,
    "batch_size": 16,
    "progress": False,
    "plots": False,
}


def config(tmp_path: Path, **over: Any) -> Any:
    return build_config(flat={**SMALL, "out": str(tmp_path / "run"), **over})


# ------------------------------------------------------------------------------ selection


def test_full_pass_is_the_seeded_choice_among_online_idle_devices() -> None:
    pop = generate_population_arrays(50, seed=3, availability_low=0.3)
    online = pop.available(100.0, seed=3)
    busy = np.flatnonzero(online)[:2]
    rng_a, rng_b = np.random.default_rng(7), np.random.default_rng(7)
    got = select_clients(pop, 100.0, 5, busy, rng_a, seed=3, period_s=3600.0)
    cand = np.flatnonzero(online & ~np.isin(np.arange(50), busy))
    assert got.tolist() == sorted(rng_b.choice(cand, 5, replace=False).tolist())


def test_sampled_selection_is_uniform_over_eligible_devices() -> None:
    """Above FULL_PASS_MAX devices: only online, idle, distinct ids; every eligible device
    equally likely (chi-square over 200 draws of 1,000 from 10^6 devices, binned by id)."""
    n = 10 * FULL_PASS_MAX
    pop = generate_population_arrays(n, seed=1, availability_low=0.5)
    busy = np.arange(0, n, 97)
    counts = np.zeros(10)
    for r in range(200):
        t = 37.0 * r
        sel = select_clients(
            pop, t, 1000, busy, np.random.default_rng([1, r]), seed=1, period_s=3600.0
        )
        assert len(sel) == 1000 and len(np.unique(sel)) == 1000
        assert pop.available_ids(t, sel, seed=1).all() and not np.isin(sel, busy).any()
        assert np.array_equal(pop.available(t, seed=1)[sel], np.ones(1000, bool))
        counts += np.bincount(sel * 10 // n, minlength=10)
    expected = counts.sum() / 10
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 27.9  # 99.9% quantile of chi-square with 9 degrees of freedom


def test_available_ids_agrees_with_the_full_mask() -> None:
    pop = generate_population_arrays(1000, seed=2, availability_low=0.2)
    ids = np.arange(0, 1000, 7)
    for t in (0.0, 1234.5, 7200.25):
        assert np.array_equal(pop.available_ids(t, ids, seed=2), pop.available(t, seed=2)[ids])


# ---------------------------------------------------------------------- virtual populations


def test_population_larger_than_the_dataset(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="use --partition virtual"):
        Simulation(config(tmp_path, num_clients=100_000, partition="iid"))
    cfg = config(tmp_path, num_clients=100_000, partition="virtual", clients_per_round=8, rounds=2)
    sim = Simulation(cfg)
    try:
        recs = sim.run()
        assert all(len(r.selected) == 8 for r in recs)
        assert max(max(r.selected) for r in recs) > 1438  # beyond the dataset's rows
        sizes = sim.fed.sizes(np.array(recs[0].selected))
        assert (sizes >= 4).all() and (sizes <= 512).all()
        assert recs[-1].accuracy is not None
    finally:
        sim.close()


def _round_peak(n: int, tmp_path: Path) -> int:
    cfg = config(
        tmp_path / str(n), num_clients=n, partition="virtual", clients_per_round=20, rounds=3
    )
    sim = Simulation(cfg)
    try:
        sim.run_round(0, 0.0)
        tracemalloc.start()
        sim.run_round(1, 0.0)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return peak
    finally:
        sim.close()


def test_round_memory_follows_the_cohort_not_the_population(tmp_path: Path) -> None:
    """A round of 20 clients allocates about the same at 10^4 and 10^6 devices (a pass over
    the 10^6 device arrays would allocate megabytes)."""
    small, large = _round_peak(10_000, tmp_path), _round_peak(1_000_000, tmp_path)
    assert large < small + 1_000_000, (small, large)


# ---------------------------------------------------------------------- traces and GPUs


def test_trace_longer_than_the_population_uses_its_first_devices(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    rows = ["compute_ms_per_sample,up_kbps,down_kbps,latency_ms,availability"]
    rows += [f"{1 + i},{100 + i},{200 + i},{i},1.0" for i in range(30)]
    trace.write_text("\n".join(rows) + "\n")
    cfg = config(tmp_path, num_clients=10, clients_per_round=10, rounds=2, device_trace=str(trace))
    sim = Simulation(cfg)
    try:
        assert len(sim.fed.population) == 10
        assert sim.fed.population.compute_ms_per_sample.tolist() == list(range(1, 11))
        recs = sim.run()
        assert all(max(r.selected) < 10 for r in recs)
    finally:
        sim.close()


def test_gpu_share_zero_forces_cpu_actors() -> None:
    from simulator.run.executor import actor_gpu_share

    assert actor_gpu_share(None, cluster_gpus=4.0) == 0.25
    assert actor_gpu_share(0.0, cluster_gpus=4.0) == 0.0
    assert actor_gpu_share(None, cluster_gpus=0.0) == 0.0
    assert actor_gpu_share(0.5, cluster_gpus=4.0) == 0.5


def test_default_actors_count_what_each_node_holds() -> None:
    """num_actors 0: a head of 2 CPUs, a node of 1 CPU and 1 GPU, a dead node of 8 CPUs.
    CPU actors: 2 + 1 = 3. Quarter-GPU actors (one CPU each): the GPU node holds min(4, 1) = 1
    (until stop 51: 4, which its 1 CPU refused). Half-GPU actors on a node of 4 CPUs and 3 GPUs:
    min(6, 4) = 4. No node holds one: still 1 (the pool then says what is missing)."""
    from simulator.run.executor import default_actors

    def node(cpu: float, gpu: float = 0.0, alive: bool = True) -> dict:
        return {"Alive": alive, "Resources": {"CPU": cpu, **({"GPU": gpu} if gpu else {})}}

    nodes = [node(2), node(1, 1), node(8, alive=False)]
    assert default_actors(nodes, 0.0) == 3
    assert default_actors(nodes, 0.25) == 1
    assert default_actors([node(4, 3)], 0.5) == 4
    assert default_actors([node(1)], 0.25) == 1


# ---------------------------------------------------------------------- per-client accuracy


def test_client_accuracy_by_hand(tmp_path: Path) -> None:
    """An all-zero model predicts class 0 everywhere, so a client's local accuracy is the share
    of label 0 in its local test rows; the summary is their mean, std and worst-10% mean."""
    cfg = config(
        tmp_path,
        num_clients=12,
        clients_per_round=4,
        rounds=1,
        model="logreg",
        client_test_fraction=0.25,
        partition="dirichlet",
        dirichlet_alpha=0.3,
    )
    sim = Simulation(cfg)
    try:
        ev = sim.client_eval
        assert ev.clients.tolist() == list(range(12))
        want = np.array(
            [
                float((y == 0).mean())
                for _, y in sim.fed.arrays(sim.fed.local_test, ev.clients, "train")
            ]
        )
        got = ev.evaluate(torch.zeros(sim.fed.layout.size))
        assert got["clients_evaluated"] == 12
        assert got["client_accuracy_mean"] == pytest.approx(want.mean())
        assert got["client_accuracy_std"] == pytest.approx(want.std())
        assert got["client_accuracy_worst10"] == pytest.approx(np.sort(want)[:2].mean())
        # the local test rows left the clients' training data
        train = sim.fed.clients.rows(np.arange(12)).index
        test = sim.fed.local_test.rows(np.arange(12)).index
        assert all(set(a).isdisjoint(b) for a, b in zip(train, test, strict=True))
    finally:
        sim.close()


def test_virtual_client_accuracy_comes_from_the_test_set(tmp_path: Path) -> None:
    from simulator.run.experiment import run_experiment

    cfg = config(
        tmp_path,
        num_clients=10**6,
        partition="virtual",
        clients_per_round=10,
        rounds=2,
        client_test_fraction=0.5,
        eval_clients=30,
    )
    s = run_experiment(cfg)
    assert s["clients_evaluated"] == 30
    assert 0.0 <= s["client_accuracy_worst10"] <= s["client_accuracy_mean"] <= 1.0


# ------------------------------------------------------------------------------- resume


#: FedDyn over 10^5 virtual devices, 100 a round, with a store budget small enough to spill
FEDDYN_SPILLING: dict[str, Any] = {
    "num_clients": 100_000,
    "partition": "virtual",
    "clients_per_round": 100,
    "rounds": 5,
    "algorithm": "feddyn",
    "algorithm_params": {"alpha": 0.1},
    "checkpoint_every": 1,
    "state_memory": "1MB",
}


def _final_global(out: Path) -> torch.Tensor:
    return torch.load(out / "checkpoint.pt", weights_only=False)["global"]


def test_feddyn_resume_at_1e5_devices_is_bitwise_identical(tmp_path: Path) -> None:
    """FedDyn over 10^5 virtual devices with a store budget small enough to spill: a run
    killed after round 2 and resumed ends with the same events, the same global model and the
    same per-client state, bit for bit, as one never interrupted."""
    from simulator.run.experiment import resume_config, run_experiment
    from simulator.run.output import read_events
    from simulator.state.store import ClientStore

    over = FEDDYN_SPILLING
    crashed = config(tmp_path / "crashed", **over)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(crashed, crash_after=2)
    out = Path(crashed.output.out)
    assert len(read_events(out / "events.jsonl")) == 2
    resumed = run_experiment(resume_config(out))
    full_cfg = config(tmp_path / "full", **over)
    full = run_experiment(full_cfg)
    strip = ("wall_time", "slowest_train_seconds", "chunks", "placement")
    ev = [{k: v for k, v in e.items() if k not in strip} for e in read_events(out / "events.jsonl")]
    ref = [
        {k: v for k, v in e.items() if k not in strip}
        for e in read_events(Path(full_cfg.output.out) / "events.jsonl")
    ]
    assert ev == ref and len(ev) == 5
    assert torch.equal(_final_global(out), _final_global(Path(full_cfg.output.out)))
    assert resumed["final_accuracy"] == full["final_accuracy"]
    trained = {c for e in ref for c in e["selected"]}
    assert full["state_store"]["clients"] == len(trained) > 450
    assert full["state_store"]["disk_bytes"] > 0  # 1 MB holds ~28 rows: it spilled
    # the per-client state the two runs end with, compared row by row
    ck = [
        torch.load(d / "checkpoint.pt", weights_only=False)["store"]
        for d in (out, Path(full_cfg.output.out))
    ]
    a = ClientStore.load(out / "state" / "checkpoint", 10**9, manifest=ck[0])
    b = ClientStore.load(Path(full_cfg.output.out) / "state" / "checkpoint", 10**9, manifest=ck[1])
    ids = np.array(sorted(trained), np.int64)
    va, pa = a.get("grad", ids)
    vb, pb = b.get("grad", ids)
    assert pa.all() and pb.all() and np.array_equal(va, vb)
    a.close()
    b.close()
