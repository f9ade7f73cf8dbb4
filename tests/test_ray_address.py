"""A Ray cluster address where no cluster is, or of a form Ray cannot use, is one line; without
one a run starts its own Ray, whatever cluster runs on the machine.

Until stop 50 ``--ray-address 127.0.0.1:1`` hung for ever (Ray retries, printing a warning every
~36 s) and ``--ray-address http://127.0.0.1:6379`` ended in a 35-line ``AssertionError``.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from cli_helper import run_cli
from cluster_helper import helper_run

from actors.ray_setup import check_address

FORM = "is not HOST:PORT, ray://HOST:PORT or auto"


@pytest.mark.parametrize(
    "address", ["http://127.0.0.1:6379", "127.0.0.1:abc", "127.0.0.1:", ":6379", "h:0", "h:65536"]
)
def test_an_address_of_another_form(address: str) -> None:
    with pytest.raises(ConnectionError) as err:
        check_address(address)
    assert str(err.value) == f"execution.ray_address: {address!r} {FORM}"


def test_an_address_where_nothing_answers_and_one_where_something_does() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        check_address(f"127.0.0.1:{port}")
        check_address(f"ray://127.0.0.1:{port}")
    check_address("auto")  # Ray's own search: left to ray.init
    with pytest.raises(ConnectionError) as err:
        check_address(f"127.0.0.1:{port}")  # closed now
    assert str(err.value) == (
        f"execution.ray_address: cannot join Ray at '127.0.0.1:{port}': nothing answers at "
        f"127.0.0.1:{port} (Connection refused)"
    )


def test_the_cli_says_it_in_one_line(tmp_path: Path) -> None:
    # a process of its own: in this one a Ray may be up already (the address is then not used)
    argv = ["--rounds", "1", "--no-progress", "--inline", "never", "--out", str(tmp_path / "r")]
    proc = run_cli(*argv, "--ray-address", "127.0.0.1:1", timeout=120)
    assert proc.returncode == 2
    assert proc.stderr == (
        "error: execution.ray_address: cannot join Ray at '127.0.0.1:1': nothing answers at "
        "127.0.0.1:1 (Connection refused)\n"
    )


@pytest.mark.slow
def test_without_an_address_a_run_starts_its_own_ray_beside_a_running_cluster(
    tmp_path: Path,
) -> None:
    # found at stop 51: with a cluster on the machine (`ray start`, or a helper's), a plain
    # ray.init() joined it and every run without --ray-address failed: "error: When connecting
    # to an existing cluster, object_store_memory must not be provided."
    helper = Path(__file__).resolve().parent / "foreign_ray.py"
    with helper_run(helper, [str(tmp_path)], "a run beside a cluster", 400):
        runs = json.loads((tmp_path / "runs.json").read_text())
    assert [r["rc"] for r in runs] == [0, 0], [r["stderr"][-300:] for r in runs]
    note = "is not used: this run starts its own Ray (join a cluster with --ray-address)"
    assert note not in runs[0]["stderr"] and note in runs[1]["stderr"]
    for name in ("plain", "env"):
        assert json.loads((tmp_path / name / "summary.json").read_text())["rounds"] == 2
