"""Flags that would do nothing: given on the command line for a setting that does not use them
(``--classes-per-client`` with the ``dirichlet`` partition, ``--deadline-s`` with
``wait_for_all``), they stop the run with one line rather than be ignored.

Only the command line's flags are checked: a config file, and the config a run saves, hold every
field, used or not.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from simulator.config.fields import ConfigError
from simulator.data.scheme_params import SHORTHAND
from simulator.policies import policy_parameters


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _inert(flat: dict[str, Any], cfg: Any) -> Iterator[tuple[str, str, str, str]]:
    """``(section, field, what it applies to, the flag that would use it)`` of each flag that
    ``cfg`` does not use."""
    part = cfg.data.partition
    for name, (schemes, _) in SHORTHAND.items():
        if part not in schemes:
            yield "data", name, f"partition {' / '.join(schemes)}, not {part!r}", "give --partition"
    policy = cfg.clock.round_policy
    takes = policy_parameters(policy)
    for name in ("deadline_s", "max_staleness"):
        if name not in takes:
            yield (
                "clock",
                name,
                f"round policies with a {name}, not {policy!r}",
                "give --round-policy",
            )
    if policy != "first_k":
        yield "clock", "first_k", f"round policy first_k, not {policy!r}", "give --round-policy"
    dev = cfg.devices
    if dev.availability_trace is None:
        trace = "give --availability-trace"
        yield "devices", "availability_period_s", "an availability trace, none is given", trace
    else:
        yield "devices", "availability_low", "the diurnal model, not a trace", "the trace"
    if not dev.gflops_median:
        yield "devices", "gflops_sigma", "devices that declare GFLOP/s", "give --gflops-median"
    if not cfg.ledger.enabled:
        yield "ledger", "committee", "runs recorded on FLChain", "give --ledger"


def check_inert(flat: dict[str, Any], cfg: Any) -> None:
    """ConfigError (one line) on the first flag of ``flat`` (the command line's, by field name)
    that ``cfg`` would not use, naming what it applies to."""
    for section, name, applies, use in _inert(flat, cfg):
        if name in flat:
            raise ConfigError(
                f"{section}.{name}: {_flag(name)} applies to {applies}; drop it or {use}"
            )
