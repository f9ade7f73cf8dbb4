"""The engine's round-invariant parts built from a config: the client-state store with the
tables the algorithm declares, and the scheduler that places training tasks on actors."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from defenses import Defense
from simulator.algorithms.base import Algorithm
from simulator.config.plugins import placement_of
from simulator.config.sections import Config
from simulator.placement.runtime import Scheduler
from simulator.policies.base import RoundPolicy
from simulator.state.store import ClientStore
from simulator.training.flat import FlatLayout
from simulator.training.groups import table_name
from simulator.training.space import ParamSpace


def check_cohort(defense: Defense, cohort: int, policy: RoundPolicy | None = None) -> None:
    """Refuse a rule that every full step would break (the run would skip every round): a
    round of ``cohort`` clients, or the updates ``policy`` aggregates a step (first_k's k,
    fedbuff's k, fedasync's one); one line naming what the rule needs."""
    rows = cohort if policy is None else policy.step_rows(cohort)
    if (why := defense.rule_precondition(rows)) is not None:
        where = (
            f"{cohort} clients a round"
            if rows == cohort
            else f"the {rows} update{'s' * (rows != 1)} round policy "
            f"{getattr(policy, 'name', '?')!r} aggregates a step"
        )
        raise ValueError(f"defense {defense.name!r}: needs {why} with {where}")


def check_accepted(algorithm: Algorithm, defense: Defense, policy: object) -> None:
    """Refuse a defense or a round policy the algorithm does not name among those it accepts
    (:attr:`~simulator.algorithms.base.Algorithm.rules`, ``policies``; None: any): one line
    naming the accepted ones."""
    rules, policies = algorithm.rules, algorithm.policies
    if rules is not None and defense.name not in rules:
        raise ValueError(
            f"defense {defense.name!r}: algorithm {algorithm.name!r} accepts only the "
            f"defenses {list(rules)} (its server update reads the rows its own way)"
        )
    name = getattr(policy, "name", None)
    if policies is not None and name not in policies:
        raise ValueError(
            f"round policy {name!r}: algorithm {algorithm.name!r} accepts only the round "
            f"policies {list(policies)}"
        )


def check_upload(algorithm: Algorithm, defense: Defense, attack: object, policy: object) -> None:
    """Refuse a defense or round policy the algorithm does not accept (:func:`check_accepted`),
    and a defense, a model attack or a row-adjusting round policy that only makes sense on
    model updates when the algorithm's clients send something else (predictions, condensed
    data): one line naming why."""
    check_accepted(algorithm, defense, policy)
    upload = algorithm.upload
    if upload == "update":
        return
    what = f"algorithm {algorithm.name!r} sends {upload!r}, not model updates"
    if getattr(policy, "adjusts_rows", False):
        name = getattr(policy, "name", "?")
        raise ValueError(
            f"round policy {name!r}: {what}; this policy rescales and mixes update rows "
            "(use a synchronous policy, e.g. 'wait_for_all' or 'deadline')"
        )
    if "*" not in defense.uploads and upload not in defense.uploads:
        raise ValueError(
            f"defense {defense.name!r}: {what}; this rule judges model updates "
            f"(use a defense that accepts {upload!r}, e.g. 'fedavg')"
        )
    if getattr(attack, "kind", None) == "model":
        name = getattr(attack, "name", "?")
        raise ValueError(
            f"attack {name!r}: {what}; a model attack rewrites update rows (use a data "
            "attack, e.g. 'labelflip')"
        )


def group_spaces(
    layouts: Sequence[FlatLayout], algorithm: Algorithm, public_entries: int = 0
) -> tuple[ParamSpace, ...]:
    """Each model group's shared and kept-local entries; empty for one group (the engine's
    ``space`` is then the model's). With several groups the algorithm must declare
    :attr:`~Algorithm.heterogeneous` and send rows of one size for every group (ValueError
    naming why otherwise)."""
    if len(layouts) <= 1:
        return ()
    spaces = tuple(ParamSpace.of(la, algorithm, public_entries) for la in layouts)
    if not algorithm.heterogeneous or spaces[0].updates:
        raise ValueError(
            f"model groups: algorithm {algorithm.name!r} averages one model shared by every "
            "client; several model groups need an algorithm for heterogeneous models"
        )
    sizes = sorted({s.size for s in spaces})
    if len(sizes) > 1:
        raise ValueError(
            f"model groups: algorithm {algorithm.name!r} sends rows of {sizes} entries for "
            "the groups' models; rows must have one size"
        )
    return spaces


def make_store(
    cfg: Config,
    algorithm: Algorithm,
    layout: FlatLayout,
    space: ParamSpace,
    spaces: Sequence[ParamSpace] = (),
    public_entries: int = 0,
) -> ClientStore:
    """The run's client-state store, with the algorithm's tables (``client_state``: a shape of
    ``'params'``, ``'model'``, ``'row'``, ``'public'`` (``public_entries``: public samples x
    classes), an int or a callable of the layout: :meth:`~Algorithm.state_entries`) and the
    kept-local entries' table ``local`` (one per model group,
    :func:`~simulator.training.groups.table_name`, where ``spaces`` lists several)."""
    store = ClientStore(cfg.execution.state_memory_bytes, Path(cfg.output.out) / "state" / "spill")
    for table, shape in algorithm.client_state.items():
        if (shape in ("params", "model") or callable(shape)) and len(spaces) > 1:
            raise ValueError(
                f"algorithm {algorithm.name!r}: client_state table {table!r} has shape "
                f"{shape!r}, which differs between model groups; use an int shape"
            )
        store.declare(table, (algorithm.state_entries(table, layout, public_entries),))
    for g, sp in enumerate(spaces or [space]):
        if sp.local is not None:
            store.declare(table_name("local", g), (len(sp.local),))
    return store


def make_scheduler(cfg: Config, flops_per_sample: float) -> Scheduler:
    """The configured placement and its chunk-time predictor."""
    placement, predictor = placement_of(cfg.execution)
    return Scheduler(
        placement,
        predictor,
        flops_per_sample,
        cfg.algorithm.batch_size,
        cfg.experiment.seed,
        cfg.execution.min_actor_mflop * 1e6 / flops_per_sample,
    )
