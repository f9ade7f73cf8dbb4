"""Typed, frozen configuration.

One dataclass per section. Field names are unique across sections, so every field becomes one
command-line flag ``--field-name`` and one YAML key under its section. Each field carries its help
text in ``metadata["help"]``; the CLI and the README's reference table are generated from it.
Values are validated when the object is built, so a bad value fails before anything starts.
The field machinery (declaration, validation, coercion, :class:`ConfigError`,
:func:`parse_size`) lives in :mod:`simulator.config.fields`; the system sections (devices,
clock, execution, output, ledger) in :mod:`simulator.config.system`. Both are re-exported here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_type_hints

import yaml

from simulator.config.fields import ConfigError, _check_choice, _coerce, _f, _positive
from simulator.config.fields import _type_name as _type_name
from simulator.config.fields import parse_size as parse_size
from simulator.config.system import POLICY_NAMES as POLICY_NAMES
from simulator.config.system import (
    ClockConfig,
    DevicesConfig,
    ExecutionConfig,
    LedgerConfig,
    OutputConfig,
)
from simulator.config.system import placement_of as placement_of
from simulator.config.system import policy_of as policy_of


@dataclass(frozen=True)
class ExperimentConfig:
    seed: int = _f(0, "seed that fixes data split, devices, sampling, attacks and training")
    rounds: int = _f(40, "number of federated rounds")
    clients_per_round: int = _f(10, "clients selected each round (among available devices)")
    eval_every: int = _f(1, "evaluate the global model every N rounds (and after the last)")
    eval_clients: int = _f(100, "per-client evaluation (--client-test-fraction > 0): clients "
                                "in the fixed seeded sample evaluated each time")
    max_virtual_hours: float = _f(0.0, "stop after the round that ends past this much virtual "
                                       "time, in hours (0 = no limit; --rounds still caps)")

    def __post_init__(self) -> None:
        _positive("experiment", self, ("rounds", "clients_per_round", "eval_every"))
        _positive("experiment", self, ("max_virtual_hours",), strict=False)
        if not 0 <= self.seed < 2**32:
            raise ConfigError(f"experiment.seed: must be in [0, 2**32), got {self.seed!r}")


DATASET_NAMES = ("digits", "mnist5k", "synthetic", "mnist1d", "mnist_idx", "cifar10",
                 "femnist_leaf")
PARTITION_NAMES = ("iid", "dirichlet", "shards", "missing", "quantity", "natural", "virtual")


@dataclass(frozen=True)
class DataConfig:
    dataset: str = _f("digits", "dataset name", DATASET_NAMES)
    data_path: str | None = _f(None, "directory of an on-disk dataset (mnist_idx, cifar10, "
                                     "femnist_leaf)")
    num_clients: int = _f(20, "clients (devices) in the population; above the training set's "
                              "size use --partition virtual")
    partition: str = _f("dirichlet", "each client's local data: a real split of the training "
                                     "set (iid, dirichlet, shards, missing, quantity), "
                                     "natural clients "
                                     "(LEAF writers; FedProx synthetic devices generated on "
                                     "demand), or 'virtual' (a seeded draw from the training "
                                     "set made when the client is selected: label mix "
                                     "Dirichlet(dirichlet_alpha), log-normal size)",
                        PARTITION_NAMES)
    dirichlet_alpha: float = _f(0.5, "Dirichlet concentration for 'dirichlet', 'quantity' and "
                                     "'virtual' label/size skew (smaller = more skewed)")
    virtual_size_median: float = _f(32.0, "virtual clients: median local training-set size")
    virtual_size_sigma: float = _f(0.6, "virtual clients: log-normal sigma of the size")
    virtual_size_min: int = _f(4, "virtual clients: smallest local training set")
    virtual_size_max: int = _f(512, "virtual clients: largest local training set")
    client_test_fraction: float = _f(0.0, "per-client local test split (partition: held out of "
                                          "each client's rows; virtual: drawn from the test "
                                          "set with the client's label mix); the summary "
                                          "reports mean, std and worst-10%% client accuracy. "
                                          "0 disables")
    classes_per_client: int = _f(2, "classes per client for the pathological 'shards' split")
    missing_classes: int = _f(1, "classes each client lacks for the 'missing' split (FedFM's "
                                 "'Missing k'; each class's samples are shared evenly by the "
                                 "clients that hold it)")
    partition_params: dict[str, Any] = _f({}, (
        "partition parameters, KEY=VALUE (repeatable), over the shorthand fields. iid: none; "
        "dirichlet: alpha, min_size, max_retries, balance; shards: classes_per_client; missing: "
        "missing_classes, max_retries; quantity: method, alpha, exponent, min_size; natural: "
        "none; virtual: alpha, size_median, size_sigma, size_min, size_max"))
    public_fraction: float = _f(0.0, "fraction of the training set carved out first as the "
                                     "server-held public/root set (Sageflow, Siren, FLTrust)")
    test_fraction: float = _f(0.2, "test fraction for datasets without a fixed test split")
    feature_shift: float = _f(0.0, "strength of per-client input transforms (feature-shift "
                                   "non-IID); 0 disables")
    synthetic_alpha: float = _f(1.0, "FedProx synthetic(alpha, beta): model heterogeneity")
    synthetic_beta: float = _f(1.0, "FedProx synthetic(alpha, beta): data heterogeneity")

    def __post_init__(self) -> None:
        _check_choice("data", self)
        _positive("data", self, ("num_clients", "dirichlet_alpha", "classes_per_client",
                                 "virtual_size_median", "virtual_size_min"))
        _positive("data", self, ("virtual_size_sigma", "missing_classes"), strict=False)
        if self.virtual_size_max < self.virtual_size_min:
            raise ConfigError(f"data.virtual_size_max: must be >= virtual_size_min "
                              f"({self.virtual_size_min}), got {self.virtual_size_max!r}")
        if not 0.0 <= self.client_test_fraction < 1.0:
            raise ConfigError(f"data.client_test_fraction: must be in [0, 1), got "
                              f"{self.client_test_fraction!r}")
        _positive("data", self, ("feature_shift", "synthetic_alpha", "synthetic_beta"),
                  strict=False)
        for n in ("public_fraction", "test_fraction"):
            v = getattr(self, n)
            if not 0.0 <= v < 1.0:
                raise ConfigError(f"data.{n}: must be in [0, 1), got {v!r}")
        self.partition_kwargs()  # a bad partition parameter fails here
        if self.dataset in ("mnist_idx", "cifar10", "femnist_leaf") and not self.data_path:
            raise ConfigError(f"data.data_path: dataset {self.dataset!r} reads files; "
                              "give --data-path DIR")

    def partition_kwargs(self) -> dict[str, Any]:
        """The partition scheme's arguments: its shorthand fields, then ``partition_params``."""
        from simulator.data.scheme_params import SHORTHAND, resolve_partition_params

        try:
            return resolve_partition_params(self.partition, {k: getattr(self, k) for k in
                                                             SHORTHAND}, self.partition_params)
        except ValueError as e:
            raise ConfigError(f"data.partition_params: {e}") from None


@dataclass(frozen=True)
class ModelConfig:
    model: str = _f("mlp", "architecture", ("logreg", "mlp", "cnn"))
    hidden: int = _f(64, "hidden width (MLP layers, CNN representation)")
    norm: str = _f("none", "normalization layers", ("none", "batch"))

    def __post_init__(self) -> None:
        _check_choice("model", self)
        _positive("model", self, ("hidden",))


@dataclass(frozen=True)
class AlgorithmConfig:
    algorithm: str = _f("fedavg", "federated algorithm (one file each in "
                                  "simulator/algorithms/: fedavg, fedprox, feddyn, scaffold, "
                                  "fedbn, moon, fedfm, fedfm_lite, fedfa, fedufo, ditto)")
    algorithm_params: dict[str, Any] = _f({}, "algorithm parameters, KEY=VALUE (repeatable), "
                                             "e.g. mu=0.01 (fedprox), alpha=0.01 (feddyn), "
                                             "tau=0.5 (moon); an unknown key lists the valid "
                                             "ones")
    lr: float = _f(0.1, "client SGD learning rate")
    momentum: float = _f(0.0, "client SGD momentum (buffer reset every round)")
    local_epochs: int = _f(5, "local epochs E")
    batch_size: int = _f(10, "local mini-batch size B")
    weight_decay: float = _f(0.0, "client L2 weight decay")
    server_lr: float = _f(1.0, "server step on the aggregated update (1 = plain averaging)")
    straggler_fraction: float = _f(0.0, "fraction of selected clients that do partial work: "
                                        "epochs ~ U{1..E} (FedProx paper, Sec. 5.2)")
    drop_stragglers: bool = _f(False, "drop the partial-work clients instead of aggregating "
                                      "them (the FedAvg baseline of the FedProx paper)")

    def __post_init__(self) -> None:
        _positive("algorithm", self, ("lr", "local_epochs", "batch_size", "server_lr"))
        _positive("algorithm", self, ("weight_decay",), strict=False)
        if not 0.0 <= self.momentum < 1.0:
            raise ConfigError(f"algorithm.momentum: must be in [0, 1), got {self.momentum!r}")
        if not 0.0 <= self.straggler_fraction <= 1.0:
            raise ConfigError("algorithm.straggler_fraction: must be in [0, 1], got "
                              f"{self.straggler_fraction!r}")
        from simulator.algorithms import make_algorithm

        make_algorithm(self)  # unknown names and parameters fail here, listing the valid ones


@dataclass(frozen=True)
class DefenseConfig:
    defense: str = _f("fedavg", "aggregation rule / defense (see defenses/)")
    defense_params: dict[str, Any] = _f({}, "defense parameters, KEY=VALUE (repeatable)")


@dataclass(frozen=True)
class AttackConfig:
    attack: str = _f("none", "Byzantine attack (see attacks/)")
    attack_fraction: float = _f(0.0, "fraction of clients that are malicious")
    malicious_mode: str = _f("fixed", "'fixed': one seeded malicious set of the population for the "
                                      "whole run; 'redraw': re-drawn each round among the "
                                      "selected (Sageflow)", ("fixed", "redraw"))
    attack_params: dict[str, Any] = _f({}, "attack parameters, KEY=VALUE (repeatable)")

    def __post_init__(self) -> None:
        from attacks import ATTACKS, make_attack

        _check_choice("attack", self)

        if self.attack not in ATTACKS:
            raise ConfigError(f"attack.attack: unknown {self.attack!r}; valid: {sorted(ATTACKS)}")
        try:
            make_attack(self.attack, **self.attack_params)
        except ValueError as e:
            raise ConfigError(f"attack.attack_params: {e}") from None
        if not 0.0 <= self.attack_fraction <= 1.0:
            raise ConfigError(f"attack.attack_fraction: must be in [0, 1], got "
                              f"{self.attack_fraction!r}")


SECTIONS: dict[str, type] = {
    "experiment": ExperimentConfig, "data": DataConfig, "model": ModelConfig,
    "devices": DevicesConfig, "clock": ClockConfig, "algorithm": AlgorithmConfig,
    "defense": DefenseConfig, "attack": AttackConfig, "execution": ExecutionConfig,
    "output": OutputConfig, "ledger": LedgerConfig,
}


@dataclass(frozen=True)
class Config:
    """The whole resolved configuration of one run."""

    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    devices: DevicesConfig = field(default_factory=DevicesConfig)
    clock: ClockConfig = field(default_factory=ClockConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    defense: DefenseConfig = field(default_factory=DefenseConfig)
    attack: AttackConfig = field(default_factory=AttackConfig)
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    ledger: LedgerConfig = field(default_factory=LedgerConfig)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}

    def save(self, path: str | Path) -> None:
        tmp = Path(f"{path}.tmp")  # a temporary file, then a rename: never half a config
        tmp.write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))
        tmp.replace(path)

    def replace(self, **flat: Any) -> Config:
        """Return a copy with flat field overrides, e.g. ``replace(rounds=5, lr=0.1)``."""
        return build_config(self.to_dict(), flat)


def field_index() -> dict[str, tuple[str, dataclasses.Field]]:
    """Map each flat field name to (section, field)."""
    out: dict[str, tuple[str, dataclasses.Field]] = {}
    for sec, cls in SECTIONS.items():
        for f in fields(cls):
            assert f.name not in out, f"duplicate config field {f.name}"
            out[f.name] = (sec, f)
    return out


def build_config(nested: dict[str, Any] | None = None, flat: dict[str, Any] | None = None
                 ) -> Config:
    """Build and validate a :class:`Config` from a nested mapping (YAML) plus flat overrides."""
    nested = nested or {}
    unknown = set(nested) - set(SECTIONS)
    if unknown:
        raise ConfigError(f"config: unknown section {sorted(unknown)[0]!r}; valid: "
                          f"{list(SECTIONS)}")
    index = field_index()
    values: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    for sec, body in nested.items():
        if body is None:
            continue
        if not isinstance(body, dict):
            raise ConfigError(f"config: section {sec!r} must be a mapping")
        valid = [f.name for f in fields(SECTIONS[sec])]
        for k, v in body.items():
            if k not in valid:
                raise ConfigError(f"{sec}.{k}: unknown key; valid: {valid}")
            values[sec][k] = v
    for k, v in (flat or {}).items():
        if k not in index:
            raise ConfigError(f"config: unknown field {k!r}; valid: {sorted(index)}")
        values[index[k][0]][k] = v
    built = {}
    for sec, cls in SECTIONS.items():
        hints = get_type_hints(cls)
        kw = {k: _coerce(sec, k, hints[k], v) for k, v in values[sec].items()}
        built[sec] = cls(**kw)
    return Config(**built)


def load_config(path: str | Path | None, flat: dict[str, Any] | None = None) -> Config:
    """Load a YAML config file (or defaults when ``path`` is None) and apply flat overrides."""
    nested: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config: file not found: {p}")
        try:
            nested = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"config: {p} is not valid YAML ({e.__class__.__name__})") from None
        if not isinstance(nested, dict):
            raise ConfigError(f"config: {p} must hold a mapping of sections")
    return build_config(nested, flat)
