"""Building a population holds each field once: its peak is what the memory budget counts.

Until stop 49 every field was held twice while a population was built (the drawn array and
``Population``'s defensive copy, ~84 bytes a device at the peak against the budget's 48), so a
run of 3*10^8 virtual devices passed the budget (~14.9 GB of 24 available) and died to the
OOM killer at 24 GB; it now peaks at 12.9 GB.
"""

from __future__ import annotations

import tracemalloc

import numpy as np

from simulator.population.devices import Population, frozen
from simulator.population.generate import generate_population_arrays

#: bytes a device the memory budget counts (simulator/run/budget.py: five fields and the phase)
BUDGET_PER_DEVICE = 48


def test_building_a_population_peaks_within_the_budget() -> None:
    n = 1_000_000
    tracemalloc.start()
    try:
        pop = generate_population_arrays(n, seed=0)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert 40 * n <= held < 42 * n  # five float64 fields
    assert peak < 45 * n < BUDGET_PER_DEVICE * n
    assert len(pop) == n


def test_the_values_are_the_lognormal_formula_bit_for_bit() -> None:
    # drawn in place now; the same bits as median * exp(sigma * Z) from the field's own stream
    pop = generate_population_arrays(5, seed=7, compute_ms_median=5.0, compute_sigma=0.6)
    rng = np.random.default_rng(np.random.SeedSequence(7).spawn(6)[0])
    want = 5.0 * np.exp(0.6 * rng.standard_normal(5))
    assert pop.compute_ms_per_sample.tobytes() == want.tobytes()


def test_a_population_copies_what_others_may_write_and_keeps_what_it_is_handed() -> None:
    fields = [np.full(3, v) for v in (5.0, 1000.0, 5000.0, 50.0, 0.5)]
    pop = Population(*fields)
    assert all(getattr(pop, f) is not a for f, a in zip(POP_FIELDS, fields, strict=True))
    fields[0][0] = 9.0  # the caller's array stays its own, writable and unshared
    assert pop.compute_ms_per_sample[0] == 5.0 and fields[0].flags.writeable
    handed = [frozen(np.full(3, v)) for v in (5.0, 1000.0, 5000.0, 50.0, 0.5)]
    pop = Population(*handed)
    assert all(getattr(pop, f) is a for f, a in zip(POP_FIELDS, handed, strict=True))
    view = frozen(np.full(6, 5.0)[:3])  # read-only, but a view of a writable array: copied
    pop = Population(view, *handed[1:])
    assert pop.compute_ms_per_sample is not view


POP_FIELDS = ("compute_ms_per_sample", "up_kbps", "down_kbps", "latency_ms", "availability")
