"""Tests for simulator.population.devices: profiles, population generator, availability, traces."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simulator.population.devices import (
    FIELDS,
    DeviceProfile,
    Population,
)
from simulator.population.generate import generate_population, generate_population_arrays
from simulator.population.traces import TraceError, load_trace

CSV_GOOD = """device_id,compute_ms_per_sample,up_kbps,down_kbps,latency_ms,availability
0,5.0,1000,8000,50,1.0
1,2.5,500,4000,0,0.5
"""
EXPECTED = [
    DeviceProfile(0, 5.0, 1000.0, 8000.0, 50.0, 1.0),
    DeviceProfile(1, 2.5, 500.0, 4000.0, 0.0, 0.5),
]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_profile_validation_names_field() -> None:
    with pytest.raises(ValueError, match="availability"):
        DeviceProfile(0, 5.0, 1.0, 1.0, 0.0, 1.5)
    with pytest.raises(ValueError, match="up_kbps"):
        DeviceProfile(0, 5.0, 0.0, 1.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="latency_ms"):
        DeviceProfile(0, 5.0, 1.0, 1.0, -1.0, 1.0)
    with pytest.raises(ValueError, match="device_id"):
        DeviceProfile(-1, 5.0, 1.0, 1.0, 0.0, 1.0)


def test_generation_is_deterministic_by_seed() -> None:
    a = generate_population(50, seed=7)
    assert a == generate_population(50, seed=7)
    assert a != generate_population(50, seed=8)
    assert [p.device_id for p in a] == list(range(50))


def test_prefix_property() -> None:
    small = generate_population_arrays(10, seed=3)
    big = generate_population_arrays(100, seed=3)
    for field in FIELDS:
        np.testing.assert_array_equal(getattr(small, field), getattr(big, field)[:10])


def test_default_distribution_medians() -> None:
    pop = generate_population_arrays(20_000, seed=0)
    assert np.median(pop.compute_ms_per_sample) == pytest.approx(5.0, rel=0.1)
    assert np.median(pop.up_kbps) == pytest.approx(1000.0, rel=0.1)
    assert np.median(pop.down_kbps) == pytest.approx(5000.0, rel=0.1)
    assert np.median(pop.latency_ms) == pytest.approx(50.0, rel=0.1)
    assert pop.availability.min() >= 0.5 and pop.availability.max() <= 1.0
    # log-space spread of compute is sigma = 0.6
    assert np.std(np.log(pop.compute_ms_per_sample)) == pytest.approx(0.6, rel=0.05)


def test_custom_parameters() -> None:
    pop = generate_population_arrays(
        1000,
        seed=1,
        compute_ms_median=2.0,
        compute_sigma=0.0,
        availability_low=0.3,
        availability_high=0.3,
    )
    np.testing.assert_allclose(pop.compute_ms_per_sample, 2.0)
    np.testing.assert_allclose(pop.availability, 0.3)


def test_million_devices() -> None:
    assert len(generate_population_arrays(1_000_000, seed=0)) == 1_000_000


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"n": 0}, "n must"),
        ({"seed": -1}, "seed"),
        ({"compute_ms_median": 0.0}, "compute_ms_median"),
        ({"up_kbps_median": -5.0}, "up_kbps_median"),
        ({"down_kbps_median": float("inf")}, "down_kbps_median"),
        ({"latency_ms_median": 0.0}, "latency_ms_median"),
        ({"bandwidth_sigma": -0.1}, "bandwidth_sigma"),
        ({"availability_low": 0.0}, "availability_low"),
        ({"availability_high": 1.5}, "availability_high"),
        ({"availability_low": 0.9, "availability_high": 0.8}, "availability_low"),
    ],
)
def test_generation_validation(kwargs: dict, name: str) -> None:
    args = {"n": 10, "seed": 0, **kwargs}
    with pytest.raises(ValueError, match=name):
        generate_population_arrays(args.pop("n"), **args)


def test_population_round_trip_and_read_only() -> None:
    pop = generate_population_arrays(20, seed=5)
    profiles = pop.to_profiles()
    assert pop.profile(4) == profiles[4]
    back = Population.from_profiles(profiles)
    for field in FIELDS:
        np.testing.assert_array_equal(getattr(back, field), getattr(pop, field))
    with pytest.raises(ValueError):
        pop.up_kbps[0] = 1.0
    with pytest.raises(IndexError):
        pop.profile(20)
    with pytest.raises(ValueError, match="device_id"):
        Population.from_profiles(profiles[1:])
    with pytest.raises(ValueError, match=r"availability\[1\]"):
        Population(*([1.0, 1.0] for _ in range(4)), availability=[1.0, 0.0])


def test_availability_fraction_matches_and_is_deterministic() -> None:
    pop = generate_population_arrays(200, seed=2, availability_low=0.1)
    steps = 2000
    period = 3600.0
    times = np.arange(steps) * period / steps
    online = np.array([pop.available(t, seed=11, period_s=period) for t in times])
    np.testing.assert_allclose(online.mean(axis=0), pop.availability, atol=2.0 / steps)
    again = pop.available(1234.5, seed=11, period_s=period)
    np.testing.assert_array_equal(again, pop.available(1234.5, seed=11, period_s=period))
    np.testing.assert_array_equal(again, pop.available(1234.5 + period, seed=11, period_s=period))
    assert not np.array_equal(pop.phases(seed=11), pop.phases(seed=12))
    # phases depend on (seed, device id) only, not on the population size
    small = generate_population_arrays(10, seed=2, availability_low=0.1)
    np.testing.assert_array_equal(small.phases(seed=11), pop.phases(seed=11)[:10])


def test_always_available_devices() -> None:
    pop = generate_population_arrays(100, seed=0, availability_low=1.0)
    assert all(pop.available(t, seed=0).all() for t in (-1e-9, 0.0, 1799.9, 3600.0, 1e7))


def test_load_csv(tmp_path: Path) -> None:
    pop = load_trace(write(tmp_path, "good.csv", CSV_GOOD))
    assert pop.to_profiles() == EXPECTED
    # columns in any order, extra columns ignored, no device_id, blank and comment lines
    text = (
        "# a trace\navailability,latency_ms,down_kbps,up_kbps,compute_ms_per_sample,os\n"
        "1.0,50,8000,1000,5.0,android\n\n0.5,0,4000,500,2.5,ios\n"
    )
    assert load_trace(str(write(tmp_path, "other.CSV", text))).to_profiles() == EXPECTED


def test_load_json(tmp_path: Path) -> None:
    rows = [{"device_id": p.device_id, **{f: getattr(p, f) for f in FIELDS}} for p in EXPECTED]
    assert load_trace(write(tmp_path, "a.json", json.dumps(rows))).to_profiles() == EXPECTED
    doc = {"devices": [{f: getattr(p, f) for f in FIELDS} for p in EXPECTED]}
    assert load_trace(write(tmp_path, "b.json", json.dumps(doc))).to_profiles() == EXPECTED


@pytest.mark.parametrize(
    "bad_row, pattern",
    [
        ("1,5.0,abc,8000,50,1.0", "field 'up_kbps' is not a number"),
        ("1,5.0,1000,8000,50,1.5", "field 'availability' must be in"),
        ("1,5.0,1000,-1,50,1.0", "field 'down_kbps' must be > 0"),
        ("1,5.0,1000,8000,-3,1.0", "field 'latency_ms' must be >= 0"),
        ("1,0,1000,8000,50,1.0", "field 'compute_ms_per_sample' must be > 0"),
        ("1,5.0,,8000,50,1.0", "missing field 'up_kbps'"),
        ("1,5.0,1000,8000", "expected 6 fields"),
        ("9,5.0,1000,8000,50,1.0", "device_id"),
    ],
)
def test_bad_csv_row_reports_file_and_line(tmp_path: Path, bad_row: str, pattern: str) -> None:
    header, row1 = CSV_GOOD.splitlines()[:2]
    path = write(tmp_path, "trace.csv", f"{header}\n{row1}\n{bad_row}\n")
    with pytest.raises(TraceError, match=pattern) as info:
        load_trace(path)
    assert "trace.csv:3:" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_bad_json_entry_reports_position(tmp_path: Path) -> None:
    entries = [{f: 1.0 for f in FIELDS} for _ in range(3)]
    entries[2]["up_kbps"] = "abc"
    with pytest.raises(TraceError, match=r"t\.json:3: field 'up_kbps'"):
        load_trace(write(tmp_path, "t.json", json.dumps(entries)))
    del entries[2]["availability"]
    entries[2]["up_kbps"] = 1.0
    with pytest.raises(TraceError, match=r"t\.json:3: missing field 'availability'"):
        load_trace(write(tmp_path, "t.json", json.dumps(entries)))
    with pytest.raises(TraceError, match=r"u\.json:2: invalid JSON"):
        load_trace(write(tmp_path, "u.json", "[\n{,\n]"))


def test_trace_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="missing.csv"):
        load_trace(tmp_path / "missing.csv")
    with pytest.raises(TraceError, match="unsupported"):
        load_trace(write(tmp_path, "t.txt", CSV_GOOD))
    with pytest.raises(TraceError, match="no devices"):
        load_trace(write(tmp_path, "empty.csv", CSV_GOOD.splitlines()[0] + "\n"))
    with pytest.raises(TraceError, match=r"h\.csv:1: bad header.*up_kbps"):
        load_trace(write(tmp_path, "h.csv", "compute_ms_per_sample,down_kbps\n1,2\n"))
    with pytest.raises(TraceError, match="list of devices"):
        load_trace(write(tmp_path, "d.json", '{"clients": []}'))


# ------------------------------------------------------------------------ declared GFLOP/s


def test_gflops_field_validation() -> None:
    assert DeviceProfile(0, 5.0, 1.0, 1.0, 0.0, 1.0).gflops == 0.0
    assert DeviceProfile(0, 5.0, 1.0, 1.0, 0.0, 1.0, gflops=2.5).gflops == 2.5
    with pytest.raises(ValueError, match="gflops must be a finite number >= 0"):
        DeviceProfile(0, 5.0, 1.0, 1.0, 0.0, 1.0, gflops=-1.0)
    ones = [np.ones(3) for _ in FIELDS]
    assert Population(*ones).gflops.tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match=r"gflops\[2\] must be >= 0"):
        Population(*ones, gflops=[1.0, 0.0, -2.0])
    with pytest.raises(ValueError, match=r"gflops\[0\] is not finite"):
        Population(*ones, gflops=[np.inf, 0.0, 0.0])
    with pytest.raises(ValueError, match="gflops must be 1-D"):
        Population(*ones, gflops=[1.0, 2.0])


def test_gflops_generation_leaves_other_fields_bitwise_unchanged() -> None:
    plain = generate_population_arrays(5000, seed=8)
    fast = generate_population_arrays(5000, seed=8, gflops_median=20.0, gflops_sigma=0.5)
    for field in FIELDS:
        assert np.array_equal(getattr(plain, field), getattr(fast, field)), field
    assert not plain.gflops.any() and (fast.gflops > 0).all()
    assert np.median(fast.gflops) == pytest.approx(20.0, rel=0.05)
    assert np.std(np.log(fast.gflops)) == pytest.approx(0.5, rel=0.05)
    small = generate_population_arrays(10, seed=8, gflops_median=20.0)
    assert np.array_equal(small.gflops, fast.gflops[:10])  # prefix property holds
    assert np.array_equal(fast.prefix(10).gflops, small.gflops)
    with pytest.raises(ValueError, match="gflops_median"):
        generate_population_arrays(10, seed=0, gflops_median=-1.0)
    with pytest.raises(ValueError, match="gflops_sigma"):
        generate_population_arrays(10, seed=0, gflops_median=1.0, gflops_sigma=float("nan"))


def test_gflops_round_trip_and_trace_column(tmp_path: Path) -> None:
    pop = generate_population_arrays(6, seed=1, gflops_median=10.0)
    profiles = pop.to_profiles()
    assert profiles[3].gflops == pop.gflops[3] and pop.profile(3) == profiles[3]
    assert np.array_equal(Population.from_profiles(profiles).gflops, pop.gflops)
    text = CSV_GOOD.replace("availability\n", "availability,gflops\n", 1)
    text = text.replace("50,1.0\n", "50,1.0,12.5\n").replace("0,0.5\n", "0,0.5,\n")
    assert load_trace(write(tmp_path, "g.csv", text)).gflops.tolist() == [12.5, 0.0]
    assert not load_trace(write(tmp_path, "plain.csv", CSV_GOOD)).gflops.any()
    doc = [
        {**{f: getattr(p, f) for f in FIELDS}, "gflops": g}
        for p, g in zip(EXPECTED, (0.0, 3.0), strict=True)
    ]
    assert load_trace(write(tmp_path, "g.json", json.dumps(doc))).gflops.tolist() == [0.0, 3.0]
    bad = text.replace("12.5", "-4")
    with pytest.raises(TraceError, match=r"g2\.csv:2: field 'gflops' must be >= 0"):
        load_trace(write(tmp_path, "g2.csv", bad))
