"""The learning sections of the configuration: the experiment, the data, the model, the
algorithm, the defense and the attack (the system sections are in :mod:`.system`).

Typed, frozen dataclasses whose ``__post_init__`` checks what a section can check alone (types
come from :func:`~simulator.config.fields.coerce`, ranges here, dataset and partition names
against their registries). Names and parameters of the plugins that import the configuration
(algorithms) or are built from it (attack, round policy, placement), and the checks that span
sections, are :func:`simulator.config.sections.validate`'s: a plugin may import these classes
without importing its own validation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.config.fields import ConfigError, check_choice, check_positive, field_of
from simulator.config.groups import MODEL_NAMES, parse_groups
from simulator.data.datasets import DATASETS, dataset_path
from simulator.data.partitions import PARTITIONS
from simulator.data.scheme_params import SHORTHAND, parameters_help, resolve_partition_params


@dataclass(frozen=True)
class ExperimentConfig:
    seed: int = field_of(0, "seed that fixes data split, devices, sampling, attacks and training")
    rounds: int = field_of(40, "number of federated rounds")
    clients_per_round: int = field_of(
        10, "clients selected each round (among available devices; at most --num-clients)"
    )
    eval_every: int = field_of(1, "evaluate the global model every N rounds (and after the last)")
    eval_clients: int = field_of(
        100,
        "per-client evaluation (--client-test-fraction > 0): clients in the fixed seeded "
        "sample evaluated each time",
    )
    client_finetune_epochs: int = field_of(
        0,
        "per-client evaluation (--client-test-fraction > 0): fine-tune each evaluated "
        "client's model on its training data for N epochs (plain SGD with the client "
        "optimizer, seeded) before testing it on its local split; 0 = off",
    )
    max_virtual_hours: float = field_of(
        0.0,
        "stop after the round that ends past this much virtual time, in hours (0 = no "
        "limit; --rounds still caps)",
    )

    def __post_init__(self) -> None:
        check_positive("experiment", self, ("rounds", "clients_per_round", "eval_every"))
        check_positive(
            "experiment", self, ("max_virtual_hours", "client_finetune_epochs"), strict=False
        )
        if not 0 <= self.seed < 2**32:
            raise ConfigError(f"experiment.seed: must be in [0, 2**32), got {self.seed!r}")


@dataclass(frozen=True)
class DataConfig:
    dataset: str = field_of("digits", "dataset name", DATASETS)
    data_path: str | None = field_of(
        None, "directory of an on-disk dataset (mnist_idx, cifar10, femnist_leaf)"
    )
    num_clients: int = field_of(
        20,
        "clients (devices) in the population; above the training set's size use "
        "--partition virtual",
    )
    partition: str = field_of(
        "dirichlet",
        "each client's local data: a real split of the training set (iid, "
        "dirichlet, shards, missing, quantity), natural clients (LEAF writers; "
        "FedProx synthetic devices generated on demand), or 'virtual' (a seeded "
        "draw from the training set made when the client is selected: label mix "
        "Dirichlet(dirichlet_alpha), log-normal size)",
        PARTITIONS,
    )
    dirichlet_alpha: float = field_of(
        0.5,
        "Dirichlet concentration for 'dirichlet', 'quantity' and 'virtual' label/size skew "
        "(smaller = more skewed)",
    )
    virtual_size_median: float = field_of(32.0, "virtual clients: median local training-set size")
    virtual_size_sigma: float = field_of(0.6, "virtual clients: log-normal sigma of the size")
    virtual_size_min: int = field_of(4, "virtual clients: smallest local training set")
    virtual_size_max: int = field_of(512, "virtual clients: largest local training set")
    client_test_fraction: float = field_of(
        0.0,
        "per-client local test split (partition: held out of each client's rows; virtual: "
        "drawn from the test set with the client's label mix); the summary reports mean, "
        "std and worst-10%% client accuracy. 0 disables",
    )
    classes_per_client: int = field_of(
        2,
        "single-class shards per client for the pathological 'shards' split (drawn at random: "
        "a client sees at most this many classes)",
    )
    missing_classes: int = field_of(
        1,
        "classes each client lacks for the 'missing' split (FedFM's 'Missing k'; each "
        "class's samples are shared evenly by the clients that hold it)",
    )
    partition_params: dict[str, Any] = field_of(
        {},
        "partition parameters, KEY=VALUE (repeatable), over the shorthand fields. "
        + parameters_help(),
    )
    public_fraction: float = field_of(
        0.0,
        "fraction of the training set carved out first as the server-held public/root set "
        "(Sageflow, Siren, FLTrust)",
    )
    test_fraction: float = field_of(0.2, "test fraction for datasets without a fixed test split")
    feature_shift: float = field_of(
        0.0, "strength of per-client input transforms (feature-shift non-IID); 0 disables"
    )
    synthetic_alpha: float = field_of(1.0, "FedProx synthetic(alpha, beta): model heterogeneity")
    synthetic_beta: float = field_of(1.0, "FedProx synthetic(alpha, beta): data heterogeneity")

    def __post_init__(self) -> None:
        check_choice("data", self)
        check_positive(
            "data",
            self,
            (
                "num_clients",
                "dirichlet_alpha",
                "classes_per_client",
                "virtual_size_median",
                "virtual_size_min",
            ),
        )
        check_positive("data", self, ("virtual_size_sigma", "missing_classes"), strict=False)
        if self.virtual_size_max < self.virtual_size_min:
            raise ConfigError(
                f"data.virtual_size_max: must be >= virtual_size_min "
                f"({self.virtual_size_min}), got {self.virtual_size_max!r}"
            )
        if not 0.0 <= self.client_test_fraction < 1.0:
            raise ConfigError(
                f"data.client_test_fraction: must be in [0, 1), got {self.client_test_fraction!r}"
            )
        check_positive(
            "data", self, ("feature_shift", "synthetic_alpha", "synthetic_beta"), strict=False
        )
        for n in ("public_fraction", "test_fraction"):
            v = getattr(self, n)
            if not 0.0 <= v < 1.0:
                raise ConfigError(f"data.{n}: must be in [0, 1), got {v!r}")
        self.partition_kwargs()  # a bad partition parameter fails here
        if dataset_path(self.dataset) == "required" and not self.data_path:
            raise ConfigError(
                f"data.data_path: dataset {self.dataset!r} reads files; give --data-path DIR"
            )

    def partition_kwargs(self) -> dict[str, Any]:
        """The partition scheme's arguments: its shorthand fields, then ``partition_params``."""
        try:
            return resolve_partition_params(
                self.partition, {k: getattr(self, k) for k in SHORTHAND}, self.partition_params
            )
        except ValueError as e:
            raise ConfigError(f"data.partition_params: {e}") from None


@dataclass(frozen=True)
class ModelConfig:
    model: str = field_of("mlp", "architecture", MODEL_NAMES)
    hidden: int = field_of(64, "hidden width (MLP layers, CNN representation)")
    norm: str = field_of("none", "normalization layers", ("none", "batch"))
    model_groups: tuple[str, ...] = field_of(
        (),
        "clients with different architectures: one model per group, NAME[:KEY=VALUE,...] "
        f"with NAME in {', '.join(MODEL_NAMES)} and KEY in hidden, norm (unset keys: --hidden, "
        "--norm), e.g. --model-groups mlp:hidden=32 mlp:hidden=64; client k is in group "
        "k mod G; several groups need an algorithm for heterogeneous models (ktpfl). "
        "Empty: every client has --model",
    )

    def __post_init__(self) -> None:
        check_choice("model", self)
        check_positive("model", self, ("hidden",))
        parse_groups(self.model_groups, self.hidden, self.norm)


@dataclass(frozen=True)
class AlgorithmConfig:
    algorithm: str = field_of(
        "fedavg",
        "federated algorithm, one file each in simulator/algorithms/",
    )
    algorithm_params: dict[str, Any] = field_of(
        {},
        "algorithm parameters, KEY=VALUE (repeatable), e.g. mu=0.01 (fedprox), alpha=0.01 "
        "(feddyn), tau=0.5 (moon); an unknown key lists the valid ones",
    )
    lr: float = field_of(0.1, "client SGD learning rate")
    momentum: float = field_of(0.0, "client SGD momentum (buffer reset every round)")
    local_epochs: int = field_of(5, "local epochs E")
    batch_size: int = field_of(10, "local mini-batch size B")
    weight_decay: float = field_of(0.0, "client L2 weight decay")
    server_lr: float = field_of(1.0, "server step on the aggregated update (1 = plain averaging)")
    straggler_fraction: float = field_of(
        0.0,
        "fraction of selected clients that do partial work: epochs ~ U{1..E} (FedProx "
        "paper, Sec. 5.2)",
    )
    drop_stragglers: bool = field_of(
        False,
        "drop the partial-work clients instead of aggregating them (the FedAvg baseline "
        "of the FedProx paper)",
    )

    def __post_init__(self) -> None:
        check_positive("algorithm", self, ("lr", "local_epochs", "batch_size", "server_lr"))
        check_positive("algorithm", self, ("weight_decay",), strict=False)
        if not 0.0 <= self.momentum < 1.0:
            raise ConfigError(f"algorithm.momentum: must be in [0, 1), got {self.momentum!r}")
        if not 0.0 <= self.straggler_fraction <= 1.0:
            raise ConfigError(
                f"algorithm.straggler_fraction: must be in [0, 1], got {self.straggler_fraction!r}"
            )


@dataclass(frozen=True)
class DefenseConfig:
    defense: str = field_of("fedavg", "aggregation rule / defense, one file each in defenses/")
    defense_params: dict[str, Any] = field_of({}, "defense parameters, KEY=VALUE (repeatable)")


@dataclass(frozen=True)
class AttackConfig:
    attack: str = field_of("none", "Byzantine attack, one file each in attacks/")
    attack_fraction: float = field_of(0.0, "fraction of clients that are malicious")
    malicious_mode: str = field_of(
        "fixed",
        "'fixed': one seeded malicious set of the population for the whole run; "
        "'redraw': re-drawn each round among the selected (Sageflow)",
        ("fixed", "redraw"),
    )
    attack_params: dict[str, Any] = field_of({}, "attack parameters, KEY=VALUE (repeatable)")

    def __post_init__(self) -> None:
        check_choice("attack", self)
        if not 0.0 <= self.attack_fraction <= 1.0:
            raise ConfigError(
                f"attack.attack_fraction: must be in [0, 1], got {self.attack_fraction!r}"
            )
