"""The system sections of the configuration: the device population, the virtual clock and its
round policy, and execution (backend, actor pool, placement); output and the ledger are in
:mod:`.output`.

The learning sections (experiment, data, model, algorithm, defense, attack) are in
:mod:`.learning`; :mod:`.sections` assembles the whole :class:`~simulator.config.sections.Config`.
Field names are unique across both modules. The round policy's and the placement's names are
checked against their registries here, their parameters by
:func:`simulator.config.sections.validate` (:mod:`.plugins`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from actors.kinds import parse_actor_kinds
from simulator.config.fields import (
    ConfigError,
    check_choice,
    check_positive,
    field_of,
    parse_size,
)
from simulator.placement import PLACEMENTS
from simulator.policies import POLICIES


@dataclass(frozen=True)
class DevicesConfig:
    device_trace: str | None = field_of(
        None,
        "CSV/JSON trace of device profiles (device i is row i; at least --num-clients rows); "
        "default: generated population",
    )
    compute_ms_median: float = field_of(5.0, "median compute time per sample, ms (FedScale-style)")
    compute_sigma: float = field_of(0.6, "log-normal sigma of compute speed")
    up_kbps_median: float = field_of(1000.0, "median upload bandwidth, kbit/s")
    down_kbps_median: float = field_of(5000.0, "median download bandwidth, kbit/s")
    bandwidth_sigma: float = field_of(0.8, "log-normal sigma of bandwidth")
    latency_ms_median: float = field_of(50.0, "median one-way latency, ms")
    availability_low: float = field_of(
        1.0, "device availability is uniform in [this, 1]; 1 = always online"
    )
    availability_trace: str | None = field_of(
        None,
        "CSV/JSON trace of online intervals (device_id,start_s,end_s per row, repeating "
        "every period); population device i follows traced device i mod T. Default: diurnal "
        "model (one window per hour of availability_low..1)",
    )
    availability_period_s: float = field_of(
        0.0,
        "period of the availability trace, seconds; 0 = the file's period_s, else its largest "
        "end_s",
    )
    gflops_median: float = field_of(
        0.0,
        "devices declare sustained GFLOP/s, log-normal with this median: compute time = model "
        "training FLOPs / GFLOP/s, so a bigger model is slower; 0 = use ms/sample",
    )
    gflops_sigma: float = field_of(
        0.5, "log-normal sigma of the declared GFLOP/s (gflops_median > 0)"
    )

    def __post_init__(self) -> None:
        check_positive("devices", self, ("compute_ms_median", "up_kbps_median", "down_kbps_median"))
        check_positive(
            "devices", self, ("compute_sigma", "bandwidth_sigma", "latency_ms_median"), strict=False
        )
        check_positive(
            "devices",
            self,
            ("availability_period_s", "gflops_median", "gflops_sigma"),
            strict=False,
        )
        if not 0.0 < self.availability_low <= 1.0:
            raise ConfigError(
                f"devices.availability_low: must be in (0, 1], got {self.availability_low!r}"
            )


@dataclass(frozen=True)
class ClockConfig:
    round_policy: str = field_of(
        "wait_for_all",
        "which updates a step waits for (one file each in simulator/policies/; "
        "fedbuff and fedasync are asynchronous: a round is a server step)",
        POLICIES,
    )
    policy_params: dict[str, Any] = field_of(
        {},
        "round policy parameters, KEY=VALUE (repeatable), e.g. ratio=1.3 (overcommit), k=10 "
        "concurrency=100 (fedbuff), alpha=0.6 a=0.5 (fedasync); an unknown key lists the valid "
        "ones",
    )
    deadline_s: float = field_of(
        60.0, "round deadline in virtual seconds (deadline policies; default of their deadline_s)"
    )
    first_k: int = field_of(
        0, "first_k policy: aggregate the first K arrivals (0 = 80%% of selected)"
    )
    max_staleness: int = field_of(5, "deadline_carryover: drop updates older than this many rounds")
    compute_factor: float = field_of(
        3.0, "compute time = factor x samples x epochs x ms/sample (forward + backward ~ 3 passes)"
    )
    dropout: bool = field_of(
        False,
        "mid-training dropout: a device that goes offline before its update is uploaded "
        "loses it (the event log lists it)",
    )

    def __post_init__(self) -> None:
        check_choice("clock", self)
        check_positive("clock", self, ("deadline_s", "compute_factor"))
        check_positive("clock", self, ("first_k", "max_staleness"), strict=False)


@dataclass(frozen=True)
class ExecutionConfig:
    backend: str = field_of(
        "ray", "where clients train: 'ray' actor pool, or 'local' in-process", ("ray", "local")
    )
    num_actors: int = field_of(0, "device actors in the pool (0 = one per CPU, or per GPU slot)")
    gpus_per_actor: float | None = field_of(
        None,
        "GPU share per actor (fractional); 0 forces CPU actors; unset: 0.25 when the cluster "
        "has GPUs, else CPU",
    )
    actor_kinds: dict[str, Any] = field_of(
        {},
        "heterogeneous actor pool, NAME=SPEC (repeatable); SPEC is comma-separated "
        "device=cpu/gpu, count=N, threads=T (torch threads = Ray CPUs), gpus=G (gpu only; "
        "default 0.25), resource=LABEL (runs on Ray nodes declaring it), e.g. "
        "fast=device=gpu,count=2,gpus=0.5; replaces num_actors and gpus_per_actor",
    )
    ray_address: str | None = field_of(
        None,
        "join an existing Ray cluster at this address (default, or 'local': start a local "
        "one); a resumed run may be given another, or --num-actors, since neither changes "
        "its results",
    )
    placement: str = field_of(
        "lpt",
        "how tasks are placed on actors: the scheduler's lpt (default; longest predicted "
        "task first, each actor's tasks sorted and cut into chunks; bitwise reproducible), "
        "minmin, sufferage, ga (predicted costs, sort-and-chunk), or greedy (LPT on "
        "samples, one chunk per actor), round_robin",
        PLACEMENTS,
    )
    placement_params: dict[str, Any] = field_of(
        {},
        "placement parameters, KEY=VALUE (repeatable): ga: generations, population, "
        "etc_generations; all but greedy/round_robin: chunking; and predictor=gbdt, linear or "
        "prior (the chunk-time model; default prior for lpt, gbdt for the others; prior never "
        "learns from measured times, so schedules, and results, are bitwise reproducible)",
    )
    min_actor_mflop: float = field_of(
        20.0,
        "greedy and round_robin: do not split a round into actor groups of less training "
        "compute than this (MFLOP; 0 = always use every actor)",
    )
    vectorize: bool = field_of(
        True,
        "train an actor's clients as one stacked vmap computation (False: one client at a time)",
    )
    preaggregate: bool = field_of(
        True,
        "for linear rules (fedavg) sum updates on the actors and ship one partial sum per "
        "actor instead of every row",
    )
    inline: str = field_of(
        "auto",
        "train a round in the driver process instead of on the actors: 'auto' when its "
        "training is below --inline-mflop (too small to pay for a Ray call), 'always', or "
        "'never'",
        ("auto", "always", "never"),
    )
    inline_mflop: float = field_of(
        300.0,
        "auto inline: rounds of less training compute than this (MFLOP, forward + backward) "
        "run in the driver, on all its threads",
    )
    state_memory: str = field_of(
        "2GB",
        "memory budget of the client-state store (per-client tensors of FedDyn, SCAFFOLD, "
        "Siren, ...); beyond it rows spill to OUT/state/spill on disk, e.g. 64MB, 1.5GB",
        metavar="SIZE",
    )

    def __post_init__(self) -> None:
        check_choice("execution", self)
        check_positive(
            "execution",
            self,
            ("num_actors", "gpus_per_actor", "min_actor_mflop", "inline_mflop"),
            strict=False,
        )
        try:
            parse_size(self.state_memory)
        except ValueError as e:
            raise ConfigError(f"execution.state_memory: {e}") from None
        g = self.gpus_per_actor
        if g is not None and g > 1 and not float(g).is_integer():
            raise ConfigError(
                f"execution.gpus_per_actor: above 1 it must be a whole number (Ray shares a "
                f"GPU only in fractions of one), got {g!r}"
            )
        if self.ray_address is not None and not str(self.ray_address).strip():
            raise ConfigError(
                "execution.ray_address: empty; leave it out to start a local Ray, or give HOST:PORT"
            )
        if self.backend == "local":
            for name, given in (
                ("ray_address", self.ray_address not in (None, "local")),  # local: the default
                ("gpus_per_actor", bool(self.gpus_per_actor)),
            ):
                if given:
                    raise ConfigError(
                        f"execution.{name}: applies to the Ray backend, not to --backend local "
                        "(which trains in this process, on its CPUs); drop one"
                    )
        if self.actor_kinds:
            try:
                parse_actor_kinds(self.actor_kinds)
            except ConfigError as e:
                raise ConfigError(f"execution.actor_kinds: {e}") from None
            if self.num_actors:
                raise ConfigError(
                    f"execution.actor_kinds: conflicts with num_actors="
                    f"{self.num_actors} (the kinds' counts size the pool; "
                    "leave num_actors 0)"
                )
            if self.gpus_per_actor is not None:
                raise ConfigError(
                    f"execution.actor_kinds: conflicts with gpus_per_actor="
                    f"{self.gpus_per_actor:g} (give each kind its own gpus=)"
                )

    @property
    def state_memory_bytes(self) -> int:
        return parse_size(self.state_memory)
