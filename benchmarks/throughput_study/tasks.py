"""The throughput study's tasks: digits (MLP) and mnist5k (CNN) over 100 clients, 10 or 100 a
round, and 100,000 virtual clients on digits with 1,000 a round; E=1, B=10, lr=0.05."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.config.sections import Config, build_config


@dataclass(frozen=True)
class Task:
    name: str
    dataset: str
    model: str
    clients_per_round: int
    clients: int = 100
    partition: str = "iid"


TASKS = (
    Task("digits-mlp-k10", "digits", "mlp", 10),
    Task("digits-mlp-k100", "digits", "mlp", 100),
    Task("mnist5k-cnn-k10", "mnist5k", "cnn", 10),
    Task("mnist5k-cnn-k100", "mnist5k", "cnn", 100),
    Task("digits-mlp-virtual100k-k1000", "digits", "mlp", 1000, 100_000, "virtual"),
)
LR, EPOCHS, BATCH = 0.05, 1, 10


def task_config(task: Task, seed: int, num_actors: int) -> Config:
    return build_config(
        flat=dict(
            dataset=task.dataset,
            model=task.model,
            num_clients=task.clients,
            partition=task.partition,
            clients_per_round=task.clients_per_round,
            local_epochs=EPOCHS,
            batch_size=BATCH,
            lr=LR,
            rounds=10**9,
            eval_every=10**9,
            seed=seed,
            backend="ray",
            num_actors=num_actors,
            progress=False,
            plots=False,
            out="/tmp/fedsentry-throughput",
        )
    )
