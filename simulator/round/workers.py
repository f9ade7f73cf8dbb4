"""Where a round trains: the configured executor (the actor pool), or the driver's own trainer
for a round too small to pay for a Ray call (``--inline``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from actors.local import LocalExecutor
from simulator.config.sections import Config
from simulator.round.plan import RoundPlan
from simulator.run.federation import Federation
from simulator.training.space import ParamSpace

log = logging.getLogger("fedsentry")


class Workers:
    """The run's executor and, built when first needed, the driver's trainer; each is
    configured with the round-invariant settings (the clean spec, the shared and local entries)
    once, before its first round.

    Parameters
    ----------
    cfg : the run's config (``execution``: backend, ``inline``, threshold, vectorize).
    fed : the federation (the driver's trainer reads its model and data).
    train_clients : the clients' training data (without Siren's holdouts).
    executor : the configured executor.
    spec : the clients' local training spec, with a data attack if the run has one.
    space : shared and kept-local entries of the flat model.
    flops_per_sample : training FLOPs per sample (a round's size against the threshold).
    spaces : with several model groups, each group's entries (``space`` is group 0's).
    """

    def __init__(
        self,
        cfg: Config,
        fed: Federation,
        train_clients: Any,
        executor: Any,
        spec: Any,
        space: ParamSpace,
        flops_per_sample: float,
        spaces: Sequence[ParamSpace] = (),
    ) -> None:
        self.cfg, self.fed, self.train_clients = cfg, fed, train_clients
        self.executor, self.spec, self.space = executor, spec, space
        self.spaces = list(spaces) or [space]
        self.flops_per_sample = flops_per_sample
        self.driver: LocalExecutor | None = None
        self.configured: set[int] = set()
        self.where = ""

    def indices(self) -> tuple[Any, Any]:
        """The shared and kept-local entries a trainer is configured with: index arrays, or
        one per model group."""
        if len(self.spaces) == 1:
            return self.space.shared, self.space.local
        return tuple(s.shared for s in self.spaces), tuple(s.local for s in self.spaces)

    def for_plan(self, plan: RoundPlan) -> tuple[Any, str]:
        """The trainer of round ``plan`` and where it runs (``"driver"`` or ``"actors"``)."""
        ex = self.cfg.execution
        flops = sum(t.num_samples * t.epochs for t in plan.tasks) * self.flops_per_sample
        inline = ex.backend == "ray" and (
            ex.inline == "always" or (ex.inline == "auto" and flops < ex.inline_mflop * 1e6)
        )
        if inline and self.driver is None:
            f = self.fed
            self.driver = LocalExecutor(
                f.specs, f.x_train, f.y_train, self.train_clients, f.transform
            )
        target, where = (self.driver, "driver") if inline else (self.executor, "actors")
        if where != self.where:
            log.info(
                "round %d trains in the %s (%.1f MFLOP; --inline %s, threshold %g MFLOP)",
                plan.round,
                where,
                flops / 1e6,
                ex.inline,
                ex.inline_mflop,
            )
            self.where = where
        if id(target) not in self.configured:
            target.configure(self.spec, ex.vectorize, *self.indices())
            self.configured.add(id(target))
        return target, where
