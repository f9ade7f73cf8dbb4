"""A Ray cluster address where no cluster is, or of a form Ray cannot use, is one line; without
one a run starts its own Ray, whatever cluster runs on the machine; an address where something
other than Ray answers is one line, and so is one that is not the Ray this process already has.

Until stop 50 ``--ray-address 127.0.0.1:1`` hung for ever (Ray retries, printing a warning every
~36 s) and ``--ray-address http://127.0.0.1:6379`` ended in a 35-line ``AssertionError``.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cli_helper import run_cli
from cluster_helper import helper_run

from actors.ray_setup import check_address, check_same_ray, ensure_ray, resolve_auto

FORM = "is not HOST:PORT, ray://HOST:PORT or auto"
NO_AUTO = (
    "execution.ray_address: 'auto' finds no cluster: RAY_ADDRESS is unset and no `ray start` ran "
    "on this machine (give the head's HOST:PORT)"
)
SETTINGS = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # an empty HTTP/2 SETTINGS frame


@contextmanager
def _server(answer: bytes | None) -> Iterator[int]:
    """A TCP server on a free port that answers each connection with ``answer`` once it reads
    something (None: reads and says nothing until the client leaves); yields the port."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(4)
    lsock.settimeout(0.2)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = lsock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    conn.recv(1024)
                    if answer is not None:
                        conn.sendall(answer)
                    else:
                        conn.recv(1024)  # silent until the client hangs up
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield lsock.getsockname()[1]
    finally:
        done.set()
        thread.join(5)
        lsock.close()


@pytest.mark.parametrize(
    "address", ["http://127.0.0.1:6379", "127.0.0.1:abc", "127.0.0.1:", ":6379", "h:0", "h:65536"]
)
def test_an_address_of_another_form(address: str) -> None:
    with pytest.raises(ConnectionError) as err:
        check_address(address)
    assert str(err.value) == f"execution.ray_address: {address!r} {FORM}"


def test_an_address_where_nothing_answers_and_one_where_something_does() -> None:
    with _server(SETTINGS) as port:  # answers an HTTP/2 preface as gRPC (a Ray GCS) does
        check_address(f"127.0.0.1:{port}")
        check_address(f"ray://127.0.0.1:{port}")
    with pytest.raises(ConnectionError) as err:
        check_address(f"127.0.0.1:{port}")  # closed now
    assert str(err.value) == (
        f"execution.ray_address: cannot join Ray at '127.0.0.1:{port}': nothing answers at "
        f"127.0.0.1:{port} (Connection refused)"
    )


def test_auto_names_ray_address_or_the_cluster_ray_start_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ray._private.utils as ray_utils

    left: list[str | None] = [None]
    monkeypatch.setattr(ray_utils, "read_ray_address", lambda temp_dir=None: left[0])
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert resolve_auto("10.0.0.7:6379") == "10.0.0.7:6379"  # any other address as it is
    with pytest.raises(ConnectionError) as err:
        resolve_auto("auto")
    assert str(err.value) == NO_AUTO
    left[0] = "10.0.0.5:6379"
    assert resolve_auto("auto") == "10.0.0.5:6379"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.6:6379")  # the environment first, as Ray's own
    assert resolve_auto("auto") == "10.0.0.6:6379"
    monkeypatch.delenv("RAY_ADDRESS")
    with _server(SETTINGS) as port:
        left[0] = f"127.0.0.1:{port}"
        check_address("auto")
    with pytest.raises(ConnectionError) as err:
        check_address("auto")  # the cluster `ray start` left has stopped
    assert str(err.value) == (
        f"execution.ray_address: cannot join Ray at 'auto (127.0.0.1:{port})': nothing answers "
        f"at 127.0.0.1:{port} (Connection refused)"
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
    with helper_run(helper, [str(tmp_path)], "a run beside a cluster", 900):
        runs = json.loads((tmp_path / "runs.json").read_text())
    assert [r["rc"] for r in runs] == [0, 0, 0, 2], [r["stderr"][-300:] for r in runs]
    note = "is not used: this run starts its own Ray (join a cluster with --ray-address)"
    assert note not in runs[0]["stderr"] and note in runs[1]["stderr"]
    for name in ("plain", "env", "auto"):
        assert json.loads((tmp_path / name / "summary.json").read_text())["rounds"] == 2
    # found at stop 57: Ray's own `auto`, finding no `ray start` address, joined any Ray process
    # on the machine (another run's private Ray, which then ends under this run)
    assert runs[3]["stderr"] == f"error: {NO_AUTO}\n"


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (b"HTTP/1.0 400 Bad request\r\n\r\n", "it said 'HTTP/1.0 400 Bad request'"),
        (b"\x17\x03\x01garbage", "it said '17030167617262616765'"),
        (b"", "it closed the connection"),
        (None, "it said nothing"),
    ],
)
def test_a_port_where_something_other_than_ray_answers(answer: bytes | None, said: str) -> None:
    # found at stop 52: an HTTP server's port passed the TCP check and ray.init retried
    # "Failed to connect to GCS ... TimedOut" for ever
    with _server(answer) as port:
        t0 = time.monotonic()
        with pytest.raises(ConnectionError) as err:
            check_address(f"127.0.0.1:{port}", timeout=1.0)
        assert time.monotonic() - t0 < 3
    assert str(err.value) == (
        f"execution.ray_address: cannot join Ray at '127.0.0.1:{port}': 127.0.0.1:{port} "
        f"answers, but not as a Ray cluster ({said} to a gRPC connection; a Ray head's port is "
        "the one `ray start --head` printed, 6379 by default)"
    )


def test_a_real_ray_head_passes_the_probe(ray_session: None) -> None:
    """The test session's Ray GCS answers the HTTP/2 preface with its SETTINGS frame."""
    import ray

    gcs = ray.get_runtime_context().gcs_address
    check_address(gcs)
    check_address("127.0.0.1:" + gcs.rpartition(":")[2])


def test_the_cli_refuses_an_http_server_in_one_line(tmp_path: Path) -> None:
    with ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler) as http:
        threading.Thread(target=http.serve_forever, daemon=True).start()
        port = http.server_address[1]
        argv = ["--rounds", "1", "--no-progress", "--out", str(tmp_path / "r")]
        proc = run_cli(*argv, "--ray-address", f"127.0.0.1:{port}", timeout=120)
        http.shutdown()
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: execution.ray_address: cannot join Ray at '127.0.0.1:{port}': 127.0.0.1:{port} "
        "answers, but not as a Ray cluster (it said '"
    ), proc.stderr


def test_a_ray_already_up_is_used_only_for_its_own_address(ray_session: None) -> None:
    # found at stop 52: with Ray initialised in the process, --ray-address was silently ignored
    import ray

    gcs = ray.get_runtime_context().gcs_address
    port = gcs.rpartition(":")[2]
    for same in (gcs, f"127.0.0.1:{port}", f"localhost:{port}", "local"):
        ensure_ray(same)
    other = f"127.0.0.1:{int(port) % 65535 + 1}"
    for address in (other, "auto", f"ray://127.0.0.1:{port}"):
        with pytest.raises(ConnectionError) as err:
            ensure_ray(address)
        assert str(err.value) == (
            f"execution.ray_address: this process already runs Ray at {gcs}, not the one at "
            f"{address!r} (one Ray per process: give its address, or run in a new process)"
        )
    assert ray.is_initialized()


def test_same_ray_compares_hosts_by_address() -> None:
    check_same_ray("127.0.0.1:6379", "10.1.2.3:6379", "10.1.2.3")  # both this machine
    check_same_ray("10.1.2.3:6379", "10.1.2.3:6379", "127.0.0.1")
    for address, current in (
        ("10.9.9.9:6379", "10.1.2.3:6379"),  # another machine
        ("127.0.0.1:6380", "127.0.0.1:6379"),  # another port
        ("127.0.0.1:6379", None),  # unknown (a Ray client)
    ):
        with pytest.raises(ConnectionError, match="this process already runs Ray at "):
            check_same_ray(address, current, "10.1.2.3")
