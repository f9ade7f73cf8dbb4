"""Building a run's parts from its config: the federation (the population's devices and client
data, the server's public and test sets, the model). The devices and their availability are
built in :mod:`simulator.run.devices`, the executors in :mod:`simulator.run.executor`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from actors.client_inputs import ClientTransform, client_arrays
from simulator.config.fields import ConfigError
from simulator.config.sections import Config
from simulator.data import Dataset, load_dataset, partition, split_public
from simulator.data.clients import ClientData, NaturalData, PartitionData, with_local_test
from simulator.population.availability import (
    Availability,
)
from simulator.population.devices import Population
from simulator.run.devices import availability_of, population_of
from simulator.training.flat import FlatLayout
from simulator.training.groups import ModelGroup, build_groups
from simulator.training.models import ModelSpec, SplitModel


@dataclass
class Federation:
    """The devices, the clients' data, the server's public and test sets and the model.

    ``availability`` says when each device is online (diurnal, or a trace of intervals; see
    :mod:`simulator.population.availability`).

    ``clients`` gives any client's local training data on demand from its id (a real partition,
    virtual draws or generated devices); nothing here is sized by the population except the
    device arrays of ``population`` (and a partition's index, bounded by the dataset).
    """

    dataset: Dataset
    x_train: np.ndarray  # the pool clients' rows index (empty for generated data)
    y_train: np.ndarray
    clients: ClientData
    transform: ClientTransform | None  # per-client input transform (feature shift)
    public_x: torch.Tensor | None
    public_y: torch.Tensor | None
    test_x: torch.Tensor
    test_y: torch.Tensor
    population: Population | None  # None: built without devices (the ledger's replay)
    model_spec: ModelSpec
    model: SplitModel
    layout: FlatLayout
    availability: Availability | None
    #: each client's local test data (``--client-test-fraction``), and which arrays its rows
    #: index ("train" or "test"); ``clients`` then holds only the rest of a partition's rows
    local_test: ClientData | None = None
    local_test_pool: str = "test"
    #: the model's initial flat state (seeded): every simulation of this federation starts from
    #: it, whatever an earlier simulation sharing the federation left in ``model``; with
    #: several model groups, the groups' initial states end to end
    initial: torch.Tensor | None = None
    #: the model of each client group (``--model-groups``; client k is in group k mod G);
    #: group 0 is ``model_spec`` / ``model`` / ``layout``. Empty: one group of those
    groups: list[ModelGroup] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.initial is None:
            self.initial = self.layout.flatten(self.model).clone()
        if not self.groups:
            self.groups = [ModelGroup(self.model_spec, self.model, self.layout, self.initial)]

    @property
    def num_groups(self) -> int:
        """G, the number of model groups (1 unless ``--model-groups`` names several)."""
        return len(self.groups)

    @property
    def public_entries(self) -> int:
        """Public samples times classes: the entries of one client's predictions on the
        server's public set (0 without one)."""
        return 0 if self.public_y is None else len(self.public_y) * self.dataset.num_classes

    @property
    def specs(self) -> ModelSpec | tuple[ModelSpec, ...]:
        """What a trainer is built from: the model spec, or one spec per group."""
        return self.model_spec if self.num_groups == 1 else tuple(g.spec for g in self.groups)

    @property
    def num_clients(self) -> int:
        return self.clients.num_clients

    def sizes(self, ids: np.ndarray) -> np.ndarray:
        """Training-sample counts of clients ``ids`` (vectorized)."""
        return self.clients.sizes(np.asarray(ids, dtype=np.int64))

    @property
    def client_sizes(self) -> np.ndarray:
        """Every client's training-sample count: O(population), for tools and small runs."""
        return self.sizes(np.arange(self.num_clients))

    @property
    def client_index(self) -> list[np.ndarray]:
        """Every client's training rows (partition sources only; O(population))."""
        if not isinstance(self.clients, PartitionData):
            raise TypeError("client_index exists only for partitioned data")
        return self.clients.to_lists()

    def arrays(
        self, source: ClientData, ids: np.ndarray, pool: str = "train"
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """``(x, y)`` of each client of ``source`` (its rows of the ``pool`` arrays: "train" or
        "test"), with the client's input transform applied."""
        x, y = (
            (self.x_train, self.y_train)
            if pool == "train"
            else (self.test_x.numpy(), self.test_y.numpy())
        )
        px, py, index = client_arrays(source, np.asarray(ids, dtype=np.int64), x, y, self.transform)
        px, py = (x, y) if px is None else (px, py)
        return [(px[i], py[i]) for i in index]


def _client_data(cfg: Config, ds: Dataset, rest: np.ndarray) -> ClientData:
    """The population's client data source (see ``DataConfig.partition``)."""
    d, seed = cfg.data, cfg.experiment.seed
    y = ds.y_train
    if d.partition == "virtual":
        from simulator.data.virtual import VirtualData

        try:
            return VirtualData(
                y,
                d.num_clients,
                seed=seed,
                pool=rest,
                test_labels=ds.y_test,
                **d.partition_kwargs(),
            )
        except ValueError as e:
            raise ConfigError(f"data.partition_params: partition 'virtual': {e}") from None
    if d.partition == "natural" and ds.groups is not None:
        try:
            nat = NaturalData.from_groups(ds.groups[rest], d.num_clients, seed=seed)
        except ValueError as e:
            raise ConfigError(f"data.num_clients: {e}") from None
        return NaturalData(rest[nat.index_flat], nat.offsets, nat.writers)
    if len(rest) < d.num_clients:
        raise ConfigError(
            f"data.num_clients: cannot give {d.num_clients} clients a sample each "
            f"from {len(rest)} samples; for a population larger than the "
            "dataset use --partition virtual"
        )
    groups = ds.groups[rest] if ds.groups is not None else None
    try:
        parts = partition(
            y[rest], d.num_clients, d.partition, seed=seed, groups=groups, **d.partition_kwargs()
        )
    except ValueError as e:
        raise ConfigError(f"data.partition: {e}") from None
    return PartitionData.from_lists([rest[p] for p in parts])


def _load(cfg: Config) -> tuple[Dataset, ClientData | None]:
    """The dataset, and the client source when the dataset generates its clients."""
    d, seed = cfg.data, cfg.experiment.seed
    if d.dataset == "synthetic" and d.partition == "natural":
        # FedProx synthetic: device k's data is generated from (seed, k) when it is selected
        from simulator.data.generated import SyntheticDevices, synthetic_test_set

        if d.public_fraction > 0:
            raise ConfigError(
                "data.public_fraction: generated synthetic devices have no pooled "
                "training set to carve a public set from; use 0"
            )
        dev = SyntheticDevices(
            d.num_clients,
            seed=seed,
            alpha=d.synthetic_alpha,
            beta=d.synthetic_beta,
            test_fraction=d.test_fraction,
        )
        xt, yt = synthetic_test_set(dev)
        dim = xt.shape[1]
        ds = Dataset(
            "synthetic",
            np.zeros((0, dim), np.float32),
            np.zeros(0, np.int64),
            xt.astype(np.float32),
            yt.astype(np.int64),
            10,
            (dim,),
        )
        return ds, dev
    extra: dict[str, object] = {}
    if d.dataset == "synthetic":
        extra = {
            "alpha": d.synthetic_alpha,
            "beta": d.synthetic_beta,
            "num_devices": max(d.num_clients, 30),
        }
    ds = load_dataset(
        d.dataset, seed=seed, path=d.data_path, test_fraction=d.test_fraction, **extra
    )
    return ds, None


def build_federation(cfg: Config, devices: bool = True) -> Federation:
    """Load, split and place everything a run needs; deterministic in ``cfg.experiment.seed``.

    Cost is O(dataset) plus O(N) vectorized numpy for the device arrays: no Python loop over the
    population (a real partition is bounded by the dataset's rows). ``devices=False`` leaves
    out the device arrays and their availability (``population`` and ``availability`` None):
    what only the server side reads (the ledger's replay), without ~0.1-0.6 s of generating
    10^6 devices."""
    d, seed = cfg.data, cfg.experiment.seed
    pop = population_of(cfg) if devices else None
    avail = availability_of(cfg, pop) if pop is not None else None  # a bad trace fails early
    ds, generated = _load(cfg)
    public_idx, rest = split_public(ds.y_train, d.public_fraction, seed=seed)
    clients = generated if generated is not None else _client_data(cfg, ds, rest)
    groups = build_groups(cfg.model, ds.input_shape, ds.num_classes, model_extension(cfg), seed)
    pub_x = torch.from_numpy(ds.x_train[public_idx]) if len(public_idx) else None
    pub_y = torch.from_numpy(ds.y_train[public_idx]) if len(public_idx) else None
    transform = ClientTransform(seed, d.feature_shift) if d.feature_shift > 0 else None
    local_test, pool = None, "test"
    if d.client_test_fraction > 0:
        clients, local_test, pool = with_local_test(clients, d.client_test_fraction, seed)
    return Federation(
        ds,
        ds.x_train.astype(np.float32, copy=False),
        ds.y_train.astype(np.int64, copy=False),
        clients,
        transform,
        pub_x,
        pub_y,
        torch.from_numpy(ds.x_test.astype(np.float32)),
        torch.from_numpy(ds.y_test.astype(np.int64)),
        pop,
        groups[0].spec,
        groups[0].model,
        groups[0].layout,
        avail,
        local_test,
        pool,
        torch.cat([g.initial for g in groups]) if len(groups) > 1 else groups[0].initial,
        groups,
    )


def model_extension(cfg: Config) -> Any:
    """The configured algorithm if it adds layers to the model (its ``extend_model``), else
    None (the model as configured)."""
    from simulator.algorithms import Algorithm, make_algorithm

    alg = make_algorithm(cfg.algorithm)
    return alg if type(alg).extend_model is not Algorithm.extend_model else None
