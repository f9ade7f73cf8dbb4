"""A run's devices from its config: the population (a device trace's first N devices, or a
generated one) and when each device is online (an availability trace, or the diurnal model)."""

from __future__ import annotations

import logging

from simulator.config.fields import ConfigError
from simulator.config.sections import Config
from simulator.population.availability import (
    AVAILABILITY_PERIOD_S,
    Availability,
    make_availability,
)
from simulator.population.devices import Population
from simulator.population.generate import generate_population_arrays
from simulator.population.traces import load_trace

log = logging.getLogger("fedsentry")


def population_of(cfg: Config) -> Population:
    """The N devices: a trace (its first N devices) or a generated population."""
    dv, n = cfg.devices, cfg.data.num_clients
    if dv.device_trace:
        pop = load_trace(dv.device_trace)
        if len(pop) < n:
            raise ConfigError(
                f"devices.device_trace: {dv.device_trace} has {len(pop)} devices, "
                f"fewer than data.num_clients={n}"
            )
        if len(pop) > n:
            log.info("device trace has %d devices; the population uses the first %d", len(pop), n)
            pop = pop.prefix(n)
        return pop
    return generate_population_arrays(
        n,
        seed=cfg.experiment.seed,
        compute_ms_median=dv.compute_ms_median,
        compute_sigma=dv.compute_sigma,
        up_kbps_median=dv.up_kbps_median,
        down_kbps_median=dv.down_kbps_median,
        bandwidth_sigma=dv.bandwidth_sigma,
        latency_ms_median=dv.latency_ms_median,
        availability_low=dv.availability_low,
        gflops_median=dv.gflops_median,
        gflops_sigma=dv.gflops_sigma,
    )


def availability_of(cfg: Config, pop: Population) -> Availability:
    """When the devices are online: the ``--availability-trace`` file's intervals, or the diurnal
    model (seeded by the experiment, period :data:`AVAILABILITY_PERIOD_S`).  A bad trace raises
    TraceError (``FILE:LINE: ...``)."""
    dv = cfg.devices
    return make_availability(
        pop,
        seed=cfg.experiment.seed,
        period_s=AVAILABILITY_PERIOD_S,
        trace=dv.availability_trace or None,
        trace_period_s=dv.availability_period_s,
    )
