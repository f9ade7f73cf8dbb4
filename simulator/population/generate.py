"""The population generator: a FedScale-style heterogeneous population of devices drawn from
log-normal compute, bandwidth and latency and uniform availability, deterministic in the seed."""

from __future__ import annotations

import math
from numbers import Integral

import numpy as np

from simulator.population.checks import check_number, check_seed
from simulator.population.devices import DeviceProfile, Population, frozen


def generate_population_arrays(
    n: int,
    *,
    seed: int,
    compute_ms_median: float = 5.0,
    compute_sigma: float = 0.6,
    up_kbps_median: float = 1000.0,
    down_kbps_median: float = 5000.0,
    bandwidth_sigma: float = 0.8,
    latency_ms_median: float = 50.0,
    latency_sigma: float = 0.5,
    availability_low: float = 0.5,
    availability_high: float = 1.0,
    gflops_median: float = 0.0,
    gflops_sigma: float = 0.5,
) -> Population:
    """Draw a FedScale-style heterogeneous population of ``n >= 1`` devices.

    Parameters
    ----------
    n, seed : int
        Population size and seed; the result is a pure function of all arguments.
    compute_ms_median, compute_sigma : float
        Compute time is ``compute_ms_median * exp(sigma * Z)``, Z standard normal: the
        spec's "5 ms/sample x LogNormal(1, 0.6)" is read as 5 ms times a log-normal
        factor with *median 1* (log-space mean 0) and log-space sigma 0.6.
    up_kbps_median, down_kbps_median, bandwidth_sigma : float
        Log-normal bandwidths (kbit/s) with these medians and log-space sigma.
    latency_ms_median, latency_sigma : float
        Log-normal one-way latency (ms).
    availability_low, availability_high : float
        Availability is uniform in ``[low, high]``, ``0 < low <= high <= 1``.
    gflops_median, gflops_sigma : float
        When ``gflops_median > 0`` each device declares a sustained training speed of
        ``gflops_median * exp(gflops_sigma * Z)`` GFLOP/s (see
        :meth:`Population.compute_seconds`); 0 (default) declares none.

    Each field comes from its own child stream of ``SeedSequence(seed)`` (GFLOP/s from a sixth
    one, so turning it on leaves the other fields bitwise unchanged), so the first
    ``m`` devices of a population of size ``n >= m`` equal the population of size ``m``
    drawn with the same arguments.  Cost is O(n), fully vectorized.
    """
    if isinstance(n, bool) or not isinstance(n, Integral) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    check_seed(seed)
    args = locals()
    for name in (
        "compute_ms_median",
        "up_kbps_median",
        "down_kbps_median",
        "latency_ms_median",
        "availability_low",
        "availability_high",
    ):
        check_number(name, args[name], high=1.0 if name.startswith("avail") else math.inf)
    for name in (
        "compute_sigma",
        "bandwidth_sigma",
        "latency_sigma",
        "gflops_median",
        "gflops_sigma",
    ):
        check_number(name, args[name], strict=False)
    if availability_low > availability_high:
        raise ValueError(
            f"availability_low ({availability_low}) must be <= "
            f"availability_high ({availability_high})"
        )
    rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(int(seed)).spawn(6)]

    def lognormal(rng: np.random.Generator, median: float, sigma: float) -> np.ndarray:
        # in place: one array per field (``median * exp(sigma * z)`` held three), bitwise the
        # same values; handed over read-only, so Population keeps it without a copy
        z = rng.standard_normal(int(n))
        z *= sigma
        np.exp(z, out=z)
        z *= median
        return frozen(z)

    return Population(
        compute_ms_per_sample=lognormal(rngs[0], compute_ms_median, compute_sigma),
        up_kbps=lognormal(rngs[1], up_kbps_median, bandwidth_sigma),
        down_kbps=lognormal(rngs[2], down_kbps_median, bandwidth_sigma),
        latency_ms=lognormal(rngs[3], latency_ms_median, latency_sigma),
        availability=frozen(rngs[4].uniform(availability_low, availability_high, int(n))),
        gflops=lognormal(rngs[5], gflops_median, gflops_sigma) if gflops_median > 0 else None,
    )


def generate_population(n: int, *, seed: int, **params: float) -> list[DeviceProfile]:
    """:func:`generate_population_arrays` (same keywords) as a list of profiles."""
    return generate_population_arrays(n, seed=seed, **params).to_profiles()
