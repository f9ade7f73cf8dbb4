"""``--client-finetune-epochs``: the per-client evaluation fine-tunes each client's model on its
training data before its local test ("FedAvg + fine-tuning"), as a plain SGD loop would, and
leaves the run itself untouched."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import small_config

from simulator.config.fields import ConfigError
from simulator.rng import client_seeds
from simulator.run.experiment import run_experiment
from simulator.run.output import read_events
from simulator.training.evaluation import FINETUNE_ROUND
from simulator.training.spec import make_schedule

RUN = {
    "dataset": "digits",
    "num_clients": 6,
    "clients_per_round": 3,
    "partition": "shards",
    "classes_per_client": 2,
    "client_test_fraction": 0.25,
    "rounds": 2,
    "lr": 0.05,
    "momentum": 0.5,
    "batch_size": 8,
}


def test_finetuned_accuracy_is_a_plain_sgd_loop_and_the_run_is_unchanged(tmp_path: Path) -> None:
    """Two epochs of SGD (momentum 0.5, batch 8) from the final global model on each evaluated
    client's training data, batches shuffled by ``client_seeds(seed, FINETUNE_ROUND, id)``,
    then its local test split: the mean matches the run's ``client_accuracy_mean``; every other
    figure of the run, and its global model, equal a run without fine-tuning."""
    from simulator.run.federation import build_federation

    runs = {}
    for name, extra in (("plain", {}), ("ft", {"client_finetune_epochs": 2})):
        cfg = small_config(tmp_path / name, **RUN, **extra, checkpoint_every=2)
        run_experiment(cfg)
        ck = torch.load(tmp_path / name / "checkpoint.pt", weights_only=False)["global"]
        runs[name] = (cfg, read_events(tmp_path / name / "events.jsonl"), ck)
    cfg, events, final = runs["ft"]
    client = {"client_accuracy_mean", "client_accuracy_std", "client_accuracy_worst10"}
    skip = client | {"wall_time", "slowest_train_seconds", "chunks", "placement"}
    assert [{k: v for k, v in e.items() if k not in skip} for e in runs["plain"][1]] == [
        {k: v for k, v in e.items() if k not in skip} for e in events
    ]
    assert torch.equal(runs["plain"][2], final)
    assert runs["plain"][1][-1]["client_accuracy_mean"] < events[-1]["client_accuracy_mean"]
    f = build_federation(cfg)
    ids = np.arange(6)  # eval_clients (100) >= num_clients: every client
    acc = []
    for (xs, ys), (xt, yt), seed in zip(
        f.arrays(f.clients, ids),
        f.arrays(f.local_test, ids, f.local_test_pool),
        client_seeds(0, FINETUNE_ROUND, ids),
        strict=True,
    ):
        model = f.model_spec.build(seed=0)
        f.layout.load(model, final)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5)
        idx, mask = make_schedule([len(ys)], [2], [int(seed)], 8)
        for s in range(idx.shape[1]):
            rows = idx[0, s][mask[0, s] > 0]
            opt.zero_grad()
            out = model(torch.from_numpy(xs[rows]))
            F.cross_entropy(out, torch.from_numpy(ys[rows])).backward()
            opt.step()
        with torch.no_grad():
            pred = model(torch.from_numpy(xt)).argmax(1).numpy()
        acc.append(float((pred == yt).mean()))
    assert events[-1]["client_accuracy_mean"] == pytest.approx(np.mean(acc), abs=1e-12)


def test_finetuning_needs_a_local_test_split() -> None:
    with pytest.raises(ConfigError, match="experiment.client_finetune_epochs: .* --client-test"):
        small_config(None, client_finetune_epochs=1)
    with pytest.raises(ConfigError, match="experiment.client_finetune_epochs: must be >= 0"):
        small_config(None, client_finetune_epochs=-1, client_test_fraction=0.2)
