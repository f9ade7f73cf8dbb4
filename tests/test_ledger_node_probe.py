"""A ``--ledger-url`` that names no usable node is refused before the run touches its directory.

Until stop 50 such a run started its directory first (an earlier run's ``summary.json`` and
``ledger/`` went, ``events.jsonl`` was begun) and only the recorder process found the node
missing; a node answering ``eth_chainId`` but nothing else ended in a 43-line traceback; and
``http://`` or ``http://[::1`` passed the config's check.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from ledger.errors import LedgerError
from ledger.node_probe import probe_node
from simulator.cli import main as sim_main
from simulator.config.fields import ConfigError
from simulator.config.sections import build_config


def _server(answer: bytes) -> Iterator[str]:
    class Reply(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    srv = HTTPServer(("127.0.0.1", 0), Reply)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture()
def node() -> Iterator[str]:
    """A node of chain id 31337 (0x7a69) that answers ``eth_chainId`` only."""
    yield from _server(json.dumps({"jsonrpc": "2.0", "id": 1, "result": "0x7a69"}).encode())


@pytest.fixture()
def html() -> Iterator[str]:
    yield from _server(b"<html>hello</html>")


def test_the_probe_by_hand(node: str, html: str) -> None:
    probe_node(node, None)
    probe_node(node, 31337)
    with pytest.raises(LedgerError, match=f"^node at {node} has chain id 31337, expected 1$"):
        probe_node(node, 1)
    with pytest.raises(
        LedgerError,
        match=f"^cannot reach JSON-RPC node at {html}: it does not answer eth_chainId "
        r"\(JSONDecodeError: ",
    ):
        probe_node(html, None)
    with pytest.raises(LedgerError, match="^cannot reach JSON-RPC node at http://127.0.0.1:9: "):
        probe_node("http://127.0.0.1:9", None)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://", "must be http(s)://HOST[:PORT]..., got 'http://'"),
        ("ftp://x", "must be http(s)://HOST[:PORT]..., got 'ftp://x'"),
        ("http://[::1", "'http://[::1': Invalid IPv6 URL"),
        ("http://h:abc", "'http://h:abc': Port could not be cast to integer value as 'abc'"),
    ],
)
def test_a_url_without_a_host_is_a_config_error(url: str, why: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_config(flat={"ledger_url": url})
    assert str(err.value) == f"ledger.ledger_url: {why}"


def test_no_node_leaves_an_earlier_run_as_it_was(
    html: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "summary.json").write_text("{}")
    (out / "events.jsonl").write_text('{"round": 0}\n')
    argv = ["--rounds", "2", "--no-progress", "--no-plots", "--out", str(out), "--ledger-url"]
    assert sim_main([*argv, html]) == 2
    assert sim_main([*argv, "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert [line.split(":", 2)[:2] for line in err] == [
        ["error", " cannot reach JSON-RPC node at http"]
    ] * 2
    assert sorted(p.name for p in out.iterdir()) == ["events.jsonl", "summary.json"]
    assert (out / "events.jsonl").read_text() == '{"round": 0}\n'
