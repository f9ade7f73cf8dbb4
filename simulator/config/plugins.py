"""The plugins a configuration names, built from their sections, with one-line ConfigErrors.

The algorithm (:func:`check_algorithm`), the round policy (:func:`policy_of`), the placement
(:func:`placement_of`), the attack (:func:`check_attack`) and the defense (:func:`check_defense`):
an unknown name lists the valid ones, an unknown parameter the plugin's parameters, and a
parameter of the wrong type names the parameter, the type it takes and the value given. The
plugin packages never import this module (an algorithm imports
:class:`~simulator.config.learning.AlgorithmConfig`, which does not import it back);
:func:`simulator.config.sections.validate` runs these checks when a config is built.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from attacks import ATTACKS, make_attack
from attacks.base import malicious_count
from defenses import DEFENSES, make_defense
from simulator.algorithms import ALGORITHMS, make_algorithm
from simulator.config.fields import ConfigError
from simulator.config.learning import (
    AlgorithmConfig,
    AttackConfig,
    DataConfig,
    DefenseConfig,
    ExperimentConfig,
    ModelConfig,
)
from simulator.config.system import ClockConfig, ExecutionConfig
from simulator.placement import PLACEMENTS, Placement, make_placement, predictor_of
from simulator.policies import RoundPolicy, make_policy, policy_parameters
from simulator.scheduler.chunking import COST_MODELS

#: the fields that name a plugin of a registry the config module cannot import (the plugins
#: import it): their names are listed in ``--help`` and the README's reference from here
NAMED = {"algorithm": ALGORITHMS, "defense": DEFENSES, "attack": ATTACKS}

#: the types a dataclass plugin's parameters are declared with, by annotation
_TYPES: dict[str, type] = {"bool": bool, "int": int, "float": float, "str": str}


def check_params(what: str, cls: type, params: Mapping[str, Any]) -> None:
    """ValueError naming the first of ``params`` whose value does not have the declared type of
    the field of that name of dataclass ``cls`` (``what`` names the plugin, e.g. ``placement
    'ga'``). A bool is no number; an int is a float. Unknown names are left to the plugin."""
    for f in dataclasses.fields(cls):
        if f.name not in params:
            continue
        kind = _TYPES.get(f.type if isinstance(f.type, str) else getattr(f.type, "__name__", ""))
        value = params[f.name]
        if kind is None:
            continue
        if kind is float:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        else:
            ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
        if not ok:
            raise ValueError(f"{what} parameter {f.name!r} must be {kind.__name__}, got {value!r}")


def check_algorithm(alg: AlgorithmConfig) -> None:
    """ConfigError on an unknown algorithm or parameter (listing the valid ones) or a bad
    parameter value (naming it and the rule)."""
    make_algorithm(alg)


def check_model_groups(model: ModelConfig, alg: AlgorithmConfig) -> None:
    """ConfigError when several model groups meet an algorithm that trains one architecture
    (its rows are model updates averaged across clients), naming the valid algorithms."""
    n = len(model.model_groups)
    if n > 1 and not make_algorithm(alg).heterogeneous:
        valid = [a for a in ALGORITHMS.names() if ALGORITHMS.get(a).heterogeneous]
        raise ConfigError(
            f"model.model_groups: {n} groups of different models, but algorithm "
            f"{alg.algorithm!r} averages one model shared by every client; valid with several "
            f"groups: {valid}"
        )


def check_public(data: DataConfig, alg: AlgorithmConfig) -> None:
    """ConfigError when the algorithm's clients use the server's public set and the run has
    none (``data.public_fraction`` 0)."""
    if data.public_fraction == 0 and make_algorithm(alg).uses_public:
        raise ConfigError(
            f"data.public_fraction: algorithm {alg.algorithm!r} uses the server's public set; "
            "give a fraction > 0 (e.g. --public-fraction 0.3)"
        )


def check_attack(attack: AttackConfig) -> None:
    """ConfigError naming ``attack.attack`` (an unknown attack, listing the valid ones) or
    ``attack.attack_params`` (a parameter the attack refuses)."""
    if attack.attack not in ATTACKS:
        raise ConfigError(f"attack.attack: unknown {attack.attack!r}; valid: {sorted(ATTACKS)}")
    if attack.attack == "none" and attack.attack_fraction > 0:
        raise ConfigError(
            f"attack.attack_fraction: {attack.attack_fraction:g} of the clients malicious, but "
            "the attack is 'none'; give --attack NAME, or leave the fraction 0"
        )
    try:
        make_attack(attack.attack, **attack.attack_params)
    except ValueError as e:
        raise ConfigError(f"attack.attack_params: {e}") from None


def check_attack_count(attack: AttackConfig, devices: int, cohort: int, each: bool) -> None:
    """ConfigError naming ``attack.attack_fraction`` when it makes no malicious client: of the
    ``devices`` (a fixed set), or of a round's ``cohort`` (redraw; ``each``: an asynchronous
    policy's, where every selected client is malicious on its own with that probability). A
    run would otherwise be a clean one under the attack's name."""
    f = attack.attack_fraction
    if attack.attack == "none" or f <= 0 or each and attack.malicious_mode == "redraw":
        return
    fixed = attack.malicious_mode == "fixed"
    pool = devices if fixed else cohort
    if malicious_count(pool, f) == 0:
        what = f"of the {pool} devices" if fixed else f"of the {pool} clients a round selects"
        raise ConfigError(
            f"attack.attack_fraction: {f:g} {what} makes no malicious client ({f:g} x {pool} "
            f"rounds to 0); give at least {0.5 / pool:.4g}, or --attack none"
        )


def check_defense(defense: DefenseConfig) -> None:
    """ConfigError naming ``defense.defense`` (an unknown rule, listing the valid ones) or
    ``defense.defense_params`` (a parameter the rule refuses, or a bad value), before anything
    starts; a precondition on the cohort (Krum's n > 2f + 2) is checked where the rule meets
    its rows."""
    if defense.defense not in DEFENSES:
        raise ConfigError(
            f"defense.defense: unknown {defense.defense!r}; valid: {sorted(DEFENSES)}"
        )
    try:
        make_defense(defense.defense, **defense.defense_params)
    except ValueError as e:
        raise ConfigError(f"defense.defense_params: {e}") from None


def defense_of(defense: DefenseConfig, experiment: ExperimentConfig) -> DefenseConfig:
    """``defense`` with the parameters its rule takes from the run filled in where the user
    gave none: a rule class's ``from_experiment`` maps a parameter to an ``experiment`` field
    (Siren: ``{"rounds_total": "rounds"}``). Resolved here, so the saved ``config.yaml``, the
    engine, a resume and the ledger's replay all see the same value; a given value is kept."""
    cls = DEFENSES[defense.defense] if defense.defense in DEFENSES else None
    wanted = getattr(cls, "from_experiment", {})
    missing = {
        p: getattr(experiment, f) for p, f in wanted.items() if p not in defense.defense_params
    }
    if not missing:
        return defense
    return dataclasses.replace(defense, defense_params={**defense.defense_params, **missing})


def policy_of(clock: ClockConfig, clients_per_round: int | None = None) -> RoundPolicy:
    """The configured round policy: the legacy fields (``deadline_s``, ``max_staleness``,
    ``first_k``) are defaults of the parameters of the same name, ``policy_params`` override
    them. ConfigError naming ``clock.policy_params`` on a bad parameter."""
    valid = policy_parameters(clock.round_policy)
    legacy = {"deadline_s": clock.deadline_s, "max_staleness": clock.max_staleness}
    params: dict[str, Any] = {k: v for k, v in legacy.items() if k in valid}
    if clock.round_policy == "first_k":
        params["k"] = clock.first_k
    params.update(clock.policy_params)
    try:
        return make_policy(clock.round_policy, clients_per_round, **params)
    except ValueError as e:
        raise ConfigError(f"clock.policy_params: {e}") from None


def placement_of(ex: ExecutionConfig) -> tuple[Placement, str]:
    """The configured placement and chunk-time predictor name (``placement_params`` less its
    ``predictor`` key); ConfigError naming ``execution.placement_params`` on a bad one."""
    params = dict(ex.placement_params)
    predictor = predictor_of(ex.placement, params)
    params.pop("predictor", None)
    if predictor not in COST_MODELS:
        raise ConfigError(
            f"execution.placement_params: unknown predictor {predictor!r}; "
            f"valid: {list(COST_MODELS)}"
        )
    try:
        check_params(f"placement {ex.placement!r}", PLACEMENTS.get(ex.placement), params)
        return make_placement(ex.placement, **params), predictor
    except (TypeError, ValueError) as e:
        raise ConfigError(f"execution.placement_params: {e}") from None
