"""Building a run's parts from its config: the federation (data split, devices, model) and the
executor (Ray actor pool or in-process)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch

from simulator.config import Config, ConfigError
from simulator.data import Dataset, feature_shift, load_dataset, partition, split_public
from simulator.devices import Population, generate_population_arrays, load_trace
from simulator.models import ModelSpec, SplitModel
from simulator.training import FlatLayout


@dataclass
class Federation:
    """The clients' data, the server's public and test sets, the devices and the model."""

    dataset: Dataset
    x_train: np.ndarray            # training set as clients see it (feature shift applied)
    y_train: np.ndarray
    client_index: list[np.ndarray]  # rows of each client
    client_sizes: np.ndarray
    public_x: torch.Tensor | None
    public_y: torch.Tensor | None
    test_x: torch.Tensor
    test_y: torch.Tensor
    population: Population
    model_spec: ModelSpec
    model: SplitModel
    layout: FlatLayout

    @property
    def num_clients(self) -> int:
        return len(self.client_index)


def _partition_params(cfg: Config) -> dict[str, object]:
    d = cfg.data
    return {"dirichlet": {"alpha": d.dirichlet_alpha}, "quantity": {"alpha": d.dirichlet_alpha},
            "shards": {"classes_per_client": d.classes_per_client}}.get(d.partition, {})


def build_federation(cfg: Config) -> Federation:
    """Load, split and place everything a run needs; deterministic in ``cfg.experiment.seed``."""
    d, seed = cfg.data, cfg.experiment.seed
    extra: dict[str, object] = {}
    if d.dataset == "synthetic":
        extra = {"alpha": d.synthetic_alpha, "beta": d.synthetic_beta,
                 "num_devices": max(d.num_clients, 30)}
    ds = load_dataset(d.dataset, seed=seed, path=d.data_path, test_fraction=d.test_fraction,
                      **extra)
    y = ds.y_train
    public_idx, rest = split_public(y, d.public_fraction, seed=seed)
    groups = ds.groups[rest] if ds.groups is not None else None
    try:
        parts = partition(y[rest], d.num_clients, d.partition, seed=seed, groups=groups,
                          **_partition_params(cfg))
    except ValueError as e:
        raise ConfigError(f"data.partition: {e}") from None
    client_index = [rest[p].astype(np.int64) for p in parts]
    x = ds.x_train.astype(np.float32, copy=True)
    if d.feature_shift > 0:
        for c, rows in enumerate(client_index):
            x[rows] = feature_shift(x[rows], c, seed=seed, strength=d.feature_shift)
    dv = cfg.devices
    if dv.device_trace:
        pop = load_trace(dv.device_trace)
        if len(pop) < d.num_clients:
            raise ConfigError(f"devices.device_trace: {dv.device_trace} has {len(pop)} devices, "
                              f"fewer than data.num_clients={d.num_clients}")
    else:
        pop = generate_population_arrays(
            d.num_clients, seed=seed, compute_ms_median=dv.compute_ms_median,
            compute_sigma=dv.compute_sigma, up_kbps_median=dv.up_kbps_median,
            down_kbps_median=dv.down_kbps_median, bandwidth_sigma=dv.bandwidth_sigma,
            latency_ms_median=dv.latency_ms_median, availability_low=dv.availability_low)
    m = cfg.model
    if m.model == "cnn" and len(ds.input_shape) != 3:
        raise ConfigError(f"model.model: 'cnn' needs image data; dataset {d.dataset!r} has "
                          f"input shape {ds.input_shape}; use 'mlp' or 'logreg'")
    spec = ModelSpec(m.model, tuple(ds.input_shape), ds.num_classes, m.hidden, m.norm)
    model = spec.build(seed=seed)
    pub_x = torch.from_numpy(ds.x_train[public_idx]) if len(public_idx) else None
    pub_y = torch.from_numpy(ds.y_train[public_idx]) if len(public_idx) else None
    return Federation(ds, x, ds.y_train.astype(np.int64), client_index,
                      np.array([len(i) for i in client_index], np.int64), pub_x, pub_y,
                      torch.from_numpy(ds.x_test.astype(np.float32)),
                      torch.from_numpy(ds.y_test.astype(np.int64)), pop, spec, model,
                      FlatLayout(model))


def make_executor(cfg: Config, fed: Federation):  # noqa: ANN201 (RayPool | LocalExecutor)
    """The configured executor: a Ray actor pool (default) or the in-process trainer."""
    from actors.pool import LocalExecutor, RayPool

    ex = cfg.execution
    if ex.backend == "local":
        return LocalExecutor(fed.model_spec, fed.x_train, fed.y_train, fed.client_index,
                             num_workers=max(ex.num_actors, 1))
    from actors.ray_setup import ensure_ray

    ensure_ray(ex.ray_address)
    import ray

    res = ray.cluster_resources()
    gpus = float(res.get("GPU", 0.0))
    share = ex.gpus_per_actor
    if share == 0 and gpus > 0:
        share = 0.25
    if ex.num_actors:
        n = ex.num_actors
    elif share > 0:
        n = max(1, int(gpus / share))
    else:
        n = max(1, int(res.get("CPU", os.cpu_count() or 1)))
    return RayPool(fed.model_spec, fed.x_train, fed.y_train, fed.client_index, n, share)
