"""The whole configuration of a run: its sections, built from YAML and flags and validated.

One typed, frozen dataclass per section: the learning sections in :mod:`.learning`, the system
sections in :mod:`.system`. Field names are unique across sections, so every field becomes one
command-line flag ``--field-name`` and one YAML key under its section. Each field carries its help
text in ``metadata["help"]``; the CLI and the README's reference table are generated from it.
Values are validated when the config is built (:func:`build_config`), so a bad value fails before
anything starts: each section checks itself, then :func:`validate` checks the plugins the config
names (:mod:`.plugins`) and what spans sections. The field machinery (declaration, validation,
coercion, :class:`ConfigError`, :func:`~simulator.config.fields.parse_size`) lives in
:mod:`.fields`.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_type_hints

import yaml

from simulator.config.fields import ConfigError, coerce
from simulator.config.learning import (
    AlgorithmConfig,
    AttackConfig,
    DataConfig,
    DefenseConfig,
    ExperimentConfig,
    ModelConfig,
)
from simulator.config.output import LedgerConfig, OutputConfig
from simulator.config.plugins import (
    check_algorithm,
    check_attack,
    check_attack_count,
    check_defense,
    check_model_groups,
    check_public,
    defense_of,
    placement_of,
    policy_of,
)
from simulator.config.system import ClockConfig, DevicesConfig, ExecutionConfig
from simulator.config.wire import CompressionConfig, compressor_of

SECTIONS: dict[str, type] = {
    "experiment": ExperimentConfig,
    "data": DataConfig,
    "model": ModelConfig,
    "devices": DevicesConfig,
    "clock": ClockConfig,
    "algorithm": AlgorithmConfig,
    "defense": DefenseConfig,
    "attack": AttackConfig,
    "compression": CompressionConfig,
    "execution": ExecutionConfig,
    "output": OutputConfig,
    "ledger": LedgerConfig,
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
    compression: CompressionConfig = field(default_factory=CompressionConfig)
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    ledger: LedgerConfig = field(default_factory=LedgerConfig)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Every section as a plain mapping (tuples as lists, as YAML writes them)."""
        return {
            name: {
                k: list(v) if isinstance(v, tuple) else v
                for k, v in dataclasses.asdict(getattr(self, name)).items()
            }
            for name in SECTIONS
        }

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


def build_config(
    nested: dict[str, Any] | None = None, flat: dict[str, Any] | None = None
) -> Config:
    """Build and validate a :class:`Config` from a nested mapping (YAML) plus flat overrides."""
    nested = nested or {}
    unknown = set(nested) - set(SECTIONS)
    if unknown:
        raise ConfigError(
            f"config: unknown section {sorted(unknown)[0]!r}; valid: {list(SECTIONS)}"
        )
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
        kw = {k: coerce(sec, k, hints[k], v) for k, v in values[sec].items()}
        built[sec] = cls(**kw)
    built["defense"] = defense_of(built["defense"], built["experiment"])
    cfg = Config(**built)
    validate(cfg)
    return cfg


def validate(cfg: Config) -> None:
    """The checks no section can make alone: the plugins' names and parameters (round policy,
    algorithm, attack, defense, placement: :mod:`.plugins`; the compressor: :mod:`.wire`), and
    a cohort no larger than the population.

    Raises
    ------
    ConfigError
        One line naming the field, what is wrong and the valid choices.
    """
    policy = policy_of(cfg.clock)
    check_algorithm(cfg.algorithm)
    check_model_groups(cfg.model, cfg.algorithm)
    check_public(cfg.data, cfg.algorithm)
    check_attack(cfg.attack)
    check_defense(cfg.defense)
    placement_of(cfg.execution)
    if cfg.experiment.client_finetune_epochs and not cfg.data.client_test_fraction:
        raise ConfigError(
            "experiment.client_finetune_epochs: fine-tunes for the per-client evaluation; "
            "give --client-test-fraction > 0"
        )
    compressor_of(cfg.compression)
    k, n = cfg.experiment.clients_per_round, cfg.data.num_clients
    if k > n:  # selection would quietly take every device each round
        raise ConfigError(
            f"experiment.clients_per_round: {k} clients a round, but the "
            f"population has {n} devices (data.num_clients); give at most {n}"
        )
    try:  # the policy's own cohort: fedbuff's concurrency, overcommit's ceil(ratio x k), ...
        policy.check_sizes(k, n)
    except ValueError as e:
        raise ConfigError(f"clock.policy_params: {e}") from None
    check_attack_count(cfg.attack, n, policy.cohort(k, 0), policy.asynchronous)
    if cfg.clock.round_policy == "first_k" and getattr(policy, "k", 0) > k:
        field = "policy_params" if "k" in cfg.clock.policy_params else "first_k"
        raise ConfigError(  # every round would wait for all: first_k in name only
            f"clock.{field}: a round closes at its first {policy.k} updates, but only {k} "
            f"clients are selected (experiment.clients_per_round); give at most {k}"
        )


class DuplicateKey(yaml.YAMLError):
    """A mapping of a config file gives one key twice."""


class _UniqueKeys(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (plain YAML keeps the
    last one silently, so a config edited by appending would change without a word)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:  # an unhashable key: the safe loader's own error says so
                break
            if key in seen:
                line = key_node.start_mark.line + 1
                raise DuplicateKey(f"key {key!r} given twice (again on line {line})")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


# YAML 1.1 reads a number in exponent form without a dot (1e-1, 5E3) as a string, which a
# float parameter then refuses with a misleading message; read it as the float it is (as YAML
# 1.2 does). A plain integer stays an int: the pattern needs the exponent.
_UniqueKeys.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def yaml_value(text: str) -> Any:
    """A value as a config file would read it (the ``VALUE`` of a flag's ``KEY=VALUE``)."""
    return yaml.load(text, Loader=_UniqueKeys)  # noqa: S506 - a safe loader


def load_config(path: str | Path | None, flat: dict[str, Any] | None = None) -> Config:
    """Load a YAML config file (or defaults when ``path`` is None) and apply flat overrides."""
    nested: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config: file not found: {p}")
        try:
            nested = yaml.load(p.read_text(), Loader=_UniqueKeys) or {}  # noqa: S506 - safe
        except DuplicateKey as e:
            raise ConfigError(f"config: {p}: {e}") from None
        except (yaml.YAMLError, UnicodeDecodeError) as e:
            raise ConfigError(f"config: {p} is not valid YAML ({e.__class__.__name__})") from None
        if not isinstance(nested, dict):
            raise ConfigError(f"config: {p} must hold a mapping of sections")
    return build_config(nested, flat)
