"""Availability trace files: every malformed CSV or JSON trace is refused with its file and
line, the CLI exits 2 on one, and a million-interval trace loads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_availability import TRACE, write

from simulator.population.availability import TraceAvailability
from simulator.population.availability_trace import load_availability_trace
from simulator.population.online_intervals import IntervalTrace
from simulator.population.traces import TraceError

# ----------------------------------------------------------------------------- trace errors

H = "device_id,start_s,end_s\n"
CSV_ERRORS = [
    (H + "0,0,10\n0,abc,20\n", ":3: start_s is not a number: 'abc'"),
    (H + "0,inf,10\n", ":2: start_s is not finite"),
    (H + "0,-5,10\n", ":2: start_s is negative"),
    (H + "0,0,10\n1,10,10\n", ":3: end_s 10 is not after start_s 10"),
    (H + "0,10,150\n", ":2: end_s 150 is past the period 100"),
    (H + "1.5,0,10\n", ":2: device_id is not an int >= 0: '1.5'"),
    (H + "-1,0,10\n", ":2: device_id is not an int >= 0"),
    (
        H + "0,0,10\n1,0,5\n0,5,20\n",
        ":4: interval [5, 20) of device 0 overlaps its previous interval [0, 10) on line 2",
    ),
    (H + "0,50,60\n0,10,20\n", ":3: interval [10, 20) of device 0 starts before"),
    (
        "# c\n\n" + H + "0,0,10\n# x\n\n0,5,20\n",
        ":7: interval [5, 20) of device 0 overlaps its previous interval [0, 10) on line 4",
    ),
    (H + "0,0,10\n0,1\n", ":3: expected 3 fields (device_id,start_s,end_s), got 2"),
    (H + "0,0,10\n0,,20\n", ":3: missing value for start_s"),
    ("device_id,start_s\n0,1\n", ":1: missing column 'end_s'"),
    (H.strip() + ",note\n0,0,10,x\n", ":1: unexpected column 'note'"),
    ("# only\n" + H, ":2: empty trace"),
    ("", ":1: empty trace"),
    (H + "0,0,10\n0,5,8\n0,x,1\n", ":3: interval [5, 8)"),  # value error before parse
    (H + "0,x,1\n0,5,1\n", ":2: start_s is not a number"),  # parse error first
]


@pytest.mark.parametrize(("text", "message"), CSV_ERRORS)
def test_csv_trace_errors_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, "bad.csv", text)
    with pytest.raises(TraceError) as err:
        load_availability_trace(path, period_s=100.0)
    assert str(err.value).startswith(f"{path}{message}"), str(err.value)
    assert "\n" not in str(err.value)


def entries(*items: str, head: str = "") -> str:
    return "{" + head + '"devices": [\n' + ",\n".join(items) + "\n]}"


OK0 = '{"device_id": 0, "online": [[0, 10]]}'
JSON_ERRORS = [
    ('{"devices": [\n{"device_id": 0,,}]}', ":2: invalid JSON"),
    ("[1, 2]", ":1: expected"),
    (entries(OK0, "3"), ":3: device entry #1 is not an object"),
    (entries(OK0, '{"device_id": 1}'), ":3: device entry #1: missing key 'online'"),
    (entries(OK0, '{"device_id": 1, "online": [], "x": 1}'), ":3: device entry #1: unexpected"),
    (entries('{"device_id": 1.5, "online": []}'), ":2: device_id is not an int >= 0: 1.5"),
    (entries('{"device_id": true, "online": []}'), ":2: device_id is not an int >= 0"),
    (entries(OK0, '{"device_id": 1, "online": [[1, 2, 3]]}'), ":3: device 1: interval [1, 2, 3]"),
    (
        entries(OK0, '{"device_id": 1, "online": [[1, NaN]]}'),
        ":3: device 1: interval [1, nan] is not finite",
    ),
    (entries(OK0, '{"device_id": 1, "online": [[-1, 2]]}'), ":3: start_s is negative"),
    (entries(OK0, '{"device_id": 1, "online": [[5, 2]]}'), ":3: end_s 2 is not after"),
    (
        entries(OK0, '{"device_id": 1, "online": [[5, 120]]}', head='"period_s": 110, '),
        ":3: end_s 120 is past the period 110",
    ),
    (
        entries(OK0, '{"device_id": 1,\n "online": [[0, 9], [5, 20]]}'),
        ":3: interval [5, 20) of device 1 overlaps its previous interval [0, 9) on line 3",
    ),
    (
        entries(OK0, '{"device_id": 0, "online": [[5, 20]]}'),
        ":3: interval [5, 20) of device 0 overlaps its previous interval [0, 10) on line 2",
    ),
    ('{"period_s": -3,\n"devices": []}', ":1: period_s must be a finite number > 0"),
    ('{"devices": [],\n "period_s": "x"}', ":2: period_s must be"),
    ('{"devices": [{"device_id": 0, "online": []}]}', ":1: empty trace"),
]


@pytest.mark.parametrize(("text", "message"), JSON_ERRORS)
def test_json_trace_errors_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, "bad.json", text)
    with pytest.raises(TraceError) as err:
        load_availability_trace(path, period_s=100.0)
    assert str(err.value).startswith(f"{path}{message}"), str(err.value)
    assert "\n" not in str(err.value)


def test_trace_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such availability trace"):
        load_availability_trace(tmp_path / "missing.csv")
    with pytest.raises(TraceError, match="unsupported trace format"):
        load_availability_trace(write(tmp_path, "t.txt", TRACE))
    with pytest.raises(ValueError, match="row 1: end_s 5 is not after start_s 9"):
        IntervalTrace.from_rows([0, 1], [0.0, 9.0], [3.0, 5.0])


def test_bad_trace_on_the_command_line_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from simulator.cli import main

    bad = write(tmp_path, "bad.csv", H + "0,0,10\n0,5,20\n")
    rc = main(
        [
            "--availability-trace",
            str(bad),
            "--backend",
            "local",
            "--rounds",
            "1",
            "--out",
            str(tmp_path / "run"),
            "--no-progress",
            "--no-plots",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err == (
        f"error: {bad}:3: interval [5, 20) of device 0 overlaps its "
        "previous interval [0, 10) on line 2; a device's intervals must "
        "be in time order and disjoint"
    )


def test_million_row_csv_loads(tmp_path: Path) -> None:
    dev = np.repeat(np.arange(1000), 1000)
    start = np.tile(np.arange(1000) * 86.4, 1000)
    body = "\n".join(
        f"{d},{s:.1f},{s + 40.0:.1f}" for d, s in zip(dev.tolist(), start.tolist(), strict=True)
    )
    path = write(tmp_path, "big.csv", H + body + "\n")
    tr = load_availability_trace(path, 86400.0)
    avail = TraceAvailability(10**6, tr)
    online = avail.online(100.0)  # 100 s is in every device's interval [86.4, 126.4)
    assert len(tr) == 1000 and len(tr.starts) == 10**6 and online.all()
    assert not avail.online_ids(130.0, np.arange(0, 10**6, 1001)).any()
