"""``--policy-param POLICY:KEY=VALUE`` of ``benchmarks/stragglers.py``: which policies take it
and its parsing, each policy built once with its parameters before anything starts."""

from __future__ import annotations

import argparse
from typing import Any

from simulator.cli import OneLineParser


def policies_run(a: argparse.Namespace) -> list[str]:
    """The policies taking ``--policy-param`` (none in the sageflow and fedprox cases)."""
    if a.scenario == "fedbuff":
        return ["wait_for_all", "fedbuff"]
    return list(a.policies) if a.scenario == "study" else []


def policy_params(
    p: OneLineParser, pairs: list[tuple[str, Any]], k: int, run: list[str]
) -> dict[str, dict[str, Any]]:
    """``--policy-param POLICY:KEY=VALUE`` pairs as {policy: {key: value}}, each policy built
    once with them (with cohort ``k``) so that a bad one fails before anything starts; one for
    a policy not in ``run`` (the policies the study runs) is refused."""
    params: dict[str, dict[str, Any]] = {}
    for key, value in pairs:
        if ":" not in key:
            p.error(f"--policy-param: expected POLICY:KEY=VALUE, got {key}={value}")
        pol, name = key.split(":", 1)
        if pol not in run:
            p.error(f"--policy-param: {pol!r} is not among the policies run: {run}")
        params.setdefault(pol, {})[name] = value
    from simulator.policies import make_policy, policy_parameters

    for pol, given in params.items():  # fail before anything starts
        try:
            probe = {"deadline_s": 1.0} if "deadline_s" in policy_parameters(pol) else {}
            make_policy(pol, k, **{**probe, **given})
        except ValueError as e:
            p.error(f"--policy-param: {e}")
    return params
