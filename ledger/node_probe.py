"""The driver's first word with a ``--ledger-url`` node, before a run touches its directory."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from ledger.errors import LedgerError


def probe_node(url: str, chain_id: int | None, timeout: float = 10.0) -> None:
    """Ask the node at ``url`` for its chain id (``eth_chainId``, plain JSON-RPC over HTTP, no
    chain stack imported) and check it against ``chain_id``.

    The recorder process connects again and checks the rest (the contract, its channel); this
    only makes the common mistakes (no node there, something else there, another chain) fail
    before the run starts its directory, where they used to fail after it had replaced an
    earlier run's files (stop 50).

    Raises
    ------
    LedgerError
        One line: the node cannot be reached, does not answer as an Ethereum node, or has
        another chain id.
    """
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []})
    req = urllib.request.Request(url, body.encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as reply:
            got = int(json.loads(reply.read())["result"], 16)
    except urllib.error.URLError as exc:  # HTTPError included
        raise LedgerError(f"cannot reach JSON-RPC node at {url}: {exc.reason}") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:  # a timeout; not JSON-RPC
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise LedgerError(
            f"cannot reach JSON-RPC node at {url}: it does not answer eth_chainId ({why})"
        ) from None
    if chain_id is not None and got != chain_id:
        raise LedgerError(f"node at {url} has chain id {got}, expected {chain_id}")
