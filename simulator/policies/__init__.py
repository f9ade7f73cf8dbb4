"""Round policies, one file each, registered by name (``--round-policy``, parameters
``--policy-param KEY=VALUE``).

========================  ==============================================================
``wait_for_all``          synchronous FedAvg: the step ends when every update has landed
``deadline``              the step ends at a deadline; late updates are dropped
``deadline_carryover``    late updates stay in flight and are aggregated stale later
``first_k``               the first ``k`` of the selected clients' updates are aggregated
``overcommit``            select ``ceil(r * K)``, aggregate the first ``K`` (FedScale)
``fedbuff``               buffered asynchronous aggregation (Nguyen et al., AISTATS 2022)
``fedasync``              every arrival mixed in with a staleness weight (Xie et al., 2019)
========================  ==============================================================

Adding a policy is one new file in this folder with a ``@register("name")`` frozen dataclass
(``register`` is ``POLICIES.register``); no engine file changes.
"""

from __future__ import annotations

from typing import Any

from simulator.policies.base import Arrival, RoundOutcome, RoundPolicy, ordered
from simulator.registry import Registry

__all__ = [
    "POLICIES",
    "Arrival",
    "RoundOutcome",
    "RoundPolicy",
    "make_policy",
    "ordered",
    "policy_names",
    "policy_parameters",
    "register",
]

POLICIES: Registry[type[RoundPolicy]] = Registry("round policy")
register = POLICIES.register


def policy_names() -> list[str]:
    """The registered policies, sorted."""
    return POLICIES.names()


def policy_parameters(name: str) -> dict[str, Any]:
    """Parameter name -> default of policy ``name`` (``dataclasses.MISSING`` when required);
    an unknown name raises :class:`~simulator.registry.UnknownName` listing the valid ones."""
    return POLICIES.parameters(name)


def make_policy(name: str, clients_per_round: int | None = None, **params: object) -> RoundPolicy:
    """Build the policy registered as ``name`` with ``params``.

    ``clients_per_round`` fills the parameters that default to the cohort size (``k`` of
    ``overcommit``, ``concurrency`` of the asynchronous policies); without it they stay 0.

    Raises
    ------
    ValueError
        Unknown name (lists the valid ones), unknown or missing parameter (lists the policy's
        parameters), or an invalid value (names the policy and the parameter).
    """
    policy = POLICIES.build(name, **params)
    return policy if clients_per_round is None else policy.resolved(clients_per_round)


POLICIES.discover(__name__)
