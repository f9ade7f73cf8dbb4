"""Availability models (diurnal, traced online intervals), trace files, dropout, and the
model-aware compute time of devices that declare GFLOP/s."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.population.availability import (
    Diurnal,
    TraceAvailability,
    lost_to_dropout,
    make_availability,
)
from simulator.population.availability_trace import load_availability_trace
from simulator.population.clock import compute_seconds_unchecked
from simulator.population.devices import Population
from simulator.population.generate import generate_population_arrays
from simulator.population.online_intervals import IntervalTrace
from simulator.population.selection import next_online_time, select_clients

# Period 100. Traced devices 0, 4, 7 (k = 0, 1, 2 in id order):
#   0: [0, 20) and [50, 100)  -> online across the wrap from 50 to 120
#   4: [10, 30)
#   7: [30, 35) and [35, 40)  -> touching, merged into [30, 40)
# Nobody is online in [40, 50).
TRACE = "device_id,start_s,end_s\n0,0,20\n4,10,30\n7,30,35\n0,50,100\n7,35,40\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.fixture
def trace(tmp_path: Path) -> IntervalTrace:
    return load_availability_trace(write(tmp_path, "t.csv", TRACE), period_s=100.0)


def test_trace_is_read_into_merged_csr_arrays(trace: IntervalTrace) -> None:
    assert trace.device_ids.tolist() == [0, 4, 7] and trace.period_s == 100.0
    assert trace.offsets.tolist() == [0, 2, 3, 4]
    assert trace.starts.tolist() == [0.0, 50.0, 10.0, 30.0]
    assert trace.ends.tolist() == [20.0, 100.0, 30.0, 40.0]


@pytest.mark.parametrize(
    ("t", "expected"),
    [
        (15.0, [True, True, False]),
        (35.0, [False, False, True]),
        (45.0, [False, False, False]),
        (60.0, [True, False, False]),
        (210.0, [True, True, False]),  # 210 = 10 of the 3rd cycle
        (-85.0, [True, True, False]),
        (20.0, [False, True, False]),
    ],
)  # ends are exclusive
def test_trace_online(trace: IntervalTrace, t: float, expected: list[bool]) -> None:
    avail = TraceAvailability(3, trace)
    assert avail.online(t).tolist() == expected
    assert avail.online_ids(t, np.array([2, 0, 1])).tolist() == [expected[i] for i in (2, 0, 1)]


def test_trace_online_until(trace: IntervalTrace) -> None:
    avail = TraceAvailability(3, trace)
    ids = np.array([0, 1, 2])
    assert avail.online_until(215.0, ids).tolist() == [220.0, 230.0, 215.0]
    assert avail.online_until(37.0, ids).tolist() == [37.0, 37.0, 40.0]  # merged interval
    # device 0 at 60: [50, 100) then [0, 20) of the next cycle, offline at 100 + 20
    assert avail.online_until(60.0, ids).tolist() == [120.0, 60.0, 60.0]
    assert avail.online_until(360.0, np.array([0])).tolist() == [420.0]
    always = IntervalTrace.from_rows([3, 5], [0.0, 10.0], [100.0, 20.0], 100.0)
    assert TraceAvailability(2, always).online_until(55.0, np.array([0, 1])).tolist() == [
        np.inf,
        55.0,
    ]


def test_trace_next_online_time(trace: IntervalTrace) -> None:
    assert TraceAvailability(3, trace).next_online_time(42.0) == 50.0
    assert TraceAvailability(3, trace).next_online_time(142.0) == 150.0
    # a 2-device population only follows traced devices 0 and 4: [30, 40) is not used
    assert TraceAvailability(2, trace).next_online_time(32.0) == 50.0
    never = IntervalTrace.from_rows([5], [10.0], [20.0], 100.0)
    lone = TraceAvailability(
        1, IntervalTrace(np.array([1, 5]), np.array([0, 0, 1]), never.starts, never.ends, 100.0)
    )
    with pytest.raises(ValueError, match="ever online"):
        lone.next_online_time(0.0)


def test_population_device_i_follows_traced_device_i_mod_t(trace: IntervalTrace) -> None:
    avail = TraceAvailability(5, trace)  # devices 0..4 -> traced 0, 4, 7, 0, 4
    assert len(avail) == 5
    assert avail.online(15.0).tolist() == [True, True, False, True, True]
    assert avail.online(35.0).tolist() == [False, False, True, False, False]
    assert avail.online_until(15.0, np.array([3, 4])).tolist() == [20.0, 30.0]


def test_selection_and_next_online_time_with_a_trace(trace: IntervalTrace) -> None:
    avail = TraceAvailability(6, trace)  # at 15: devices 0, 1, 3, 4 online
    got = select_clients(avail, 15.0, 3, np.array([1]), np.random.default_rng(0))
    assert len(got) == 3 and set(got.tolist()) <= {0, 3, 4}
    assert (
        select_clients(avail, 45.0, 3, np.zeros(0, np.int64), np.random.default_rng(0)).tolist()
        == []
    )
    assert next_online_time(avail, 45.0) == 50.0


def test_diurnal_agrees_with_population_available() -> None:
    pop = generate_population_arrays(1000, seed=4, availability_low=0.2)
    model = Diurnal(pop, 4, 3600.0)
    ids = np.arange(0, 1000, 3)
    for t in (0.0, 17.25, 1800.0, 3599.9, 98765.4321):
        online = pop.available(t, seed=4, period_s=3600.0)
        assert np.array_equal(model.online(t), online)
        assert np.array_equal(model.online_ids(t, ids), online[ids])
        until = model.online_until(t, ids)
        assert np.array_equal(until > t, online[ids]) and (until[~online[ids]] == t).all()
    wait = np.mod(pop.phases(seed=4, period_s=3600.0) - 5.0, 3600.0)
    assert model.next_online_time(5.0) == 5.0 + float(wait.min()) + 1e-6


def test_diurnal_online_until_by_hand() -> None:
    # period 100; availabilities 1, 0.5 and 0.25: windows of 100 (always), 50 and 25 seconds
    pop = Population(*(np.ones(3),) * 4, np.array([1.0, 0.5, 0.25]))
    model = Diurnal(pop, 9, 100.0)
    phase = pop.phases(seed=9, period_s=100.0)
    assert model.online_until(12.0, np.array([0])).tolist() == [np.inf]
    assert model.online_until(phase[1] + 10.0, np.array([1]))[0] == pytest.approx(
        phase[1] + 50.0, abs=1e-9
    )
    assert model.online_until(phase[1] + 60.0, np.array([1]))[0] == phase[1] + 60.0  # offline
    assert model.online_until(phase[2] + 124.0, np.array([2]))[0] == pytest.approx(
        phase[2] + 125.0, abs=1e-9
    )  # next cycle's window


def test_diurnal_selection_is_bitwise_the_old_one() -> None:
    """Ids the selection gave before availability models existed (same seeds)."""
    small = generate_population_arrays(50, seed=3, availability_low=0.3)
    big = generate_population_arrays(300_000, seed=9, availability_low=0.4)
    for pop, seed, t, m, want in (
        (small, 3, 100.0, 5, [10, 17, 25, 37, 38]),
        (big, 9, 1234.5, 7, [76100, 98447, 107354, 144506, 212894, 249080, 280187]),
    ):
        busy = np.arange(0, len(pop), 3)
        got = select_clients(
            Diurnal(pop, seed, 3600.0), t, m, busy, np.random.default_rng([seed, 1])
        )
        assert got.tolist() == want
    assert next_online_time(Diurnal(small, 3, 3600.0), 100.0) == 127.32555120767822


def test_lost_to_dropout_by_hand(trace: IntervalTrace) -> None:
    avail = TraceAvailability(4, trace)  # at 15 devices 0..3 stay online until 20, 30, -, 20
    finish = np.array([19.0, 31.0, 15.5, 20.0])
    assert lost_to_dropout(avail, 15.0, finish, np.arange(4)).tolist() == [False, True, True, False]
    with pytest.raises(ValueError, match="same shape"):
        lost_to_dropout(avail, 15.0, finish, np.arange(3))


def test_make_availability(tmp_path: Path) -> None:
    pop = generate_population_arrays(5, seed=1)
    assert isinstance(make_availability(pop, seed=1, period_s=3600.0), Diurnal)
    path = write(
        tmp_path,
        "t.json",
        '{"devices": [{"device_id": 2, "online": [[0, 30]]},\n{"device_id": 0, "online": []}]}',
    )
    model = make_availability(pop, seed=1, period_s=3600.0, trace=path, trace_period_s=60.0)
    assert isinstance(model, TraceAvailability) and model.period_s == 60.0
    # traced ids 0 (never online), 2: population devices 1 and 3 follow device 2
    assert model.online(70.0).tolist() == [False, True, False, True, False]


def test_trace_period_precedence(tmp_path: Path) -> None:
    csv = write(tmp_path, "p.csv", "end_s,device_id,start_s\n30,0,10\n")  # any column order
    assert load_availability_trace(csv).period_s == 30.0
    assert load_availability_trace(csv, 150.0).period_s == 150.0
    js = write(
        tmp_path, "p.json", '{"period_s": 200, "devices": [{"device_id": 0, "online": [[10, 30]]}]}'
    )
    assert load_availability_trace(js, 150.0).period_s == 200.0


# --------------------------------------------------------------------- model-aware compute


def test_compute_seconds_with_and_without_declared_gflops() -> None:
    ms = np.array([5.0, 2.0, 10.0])
    plain = Population(ms, *(np.ones(3),) * 4)
    fast = Population(ms, *(np.ones(3),) * 4, gflops=np.array([0.0, 2.0, 0.5]))
    ids, samples, epochs = np.array([0, 1, 2]), np.array([100, 50, 10]), np.array([2, 1, 3])
    # ms/sample: 3 * 100 * 2 * 5 / 1000 = 3; 3 * 50 * 1 * 2 / 1000 = 0.3; 3 * 10 * 3 * 10 / 1000
    assert plain.compute_seconds(ids, samples, epochs, 3.0, 1e6).tolist() == [3.0, 0.3, 0.9]
    # GFLOP/s: 1e6 * 50 / 2e9 = 0.025 and 1e6 * 30 / 0.5e9 = 0.06; device 0 declares none
    assert fast.compute_seconds(ids, samples, epochs, 3.0, 1e6).tolist() == pytest.approx(
        [3.0, 0.025, 0.06], rel=1e-15
    )
    assert fast.compute_seconds(ids, samples, epochs, 3.0, 2e6)[1:].tolist() == pytest.approx(
        [0.05, 0.12], rel=1e-15
    )  # a bigger model is slower
    pop = generate_population_arrays(200, seed=5)
    sel, n, e = np.arange(0, 200, 7), np.arange(29) * 3 + 1.0, np.full(29, 2.0)
    assert np.array_equal(
        pop.compute_seconds(sel, n, e, 3.0, 1e6),
        compute_seconds_unchecked(n, e, pop.compute_ms_per_sample[sel], np.float64(3.0)),
    )
    with pytest.raises(ValueError, match="train_flops_per_sample"):
        fast.compute_seconds(ids, samples, epochs, 3.0, 0.0)
    # one figure per device (clients of different model groups): 1e6 * 50 / 2e9 = 0.025 and
    # 4e6 * 30 / 0.5e9 = 0.24; device 0 declares no GFLOP/s and keeps its ms/sample
    per = np.array([9e9, 1e6, 4e6])
    assert fast.compute_seconds(ids, samples, epochs, 3.0, per).tolist() == pytest.approx(
        [3.0, 0.025, 0.24], rel=1e-15
    )
    for bad in (np.array([1e6, 1e6]), np.array([1e6, 0.0, 1e6]), np.array([1e6, np.nan, 1.0])):
        with pytest.raises(ValueError, match="one finite value > 0 per device id"):
            fast.compute_seconds(ids, samples, epochs, 3.0, bad)
