"""Real local Ethereum nodes for the ledger integration tests.

Foundry's anvil ships on npm as ``@foundry-rs/anvil`` (pinned in the root ``package.json``); the
native binary comes in a per-platform optional dependency, ``@foundry-rs/anvil-<os>-<arch>``, so
``npm install`` at the repository root (the README's Quick start test command) puts it under
``node_modules`` from the registry alone.  This module runs that binary directly (not the
package's node wrapper), bound to 127.0.0.1 on a port the kernel picks, with anvil's well-known
dev mnemonic, and signs with the matching keys.

``FEDSENTRY_ANVIL`` may name another anvil binary.  When none is found the integration tests are
skipped, unless ``FEDSENTRY_REQUIRE_NODE=1`` (set by ``.ci/run``), which makes them fail.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from eth_account import Account

from ledger.chain import Chain

ROOT = Path(__file__).resolve().parent.parent
NODE_MODULES = ROOT / "node_modules"
#: Env var naming an anvil binary to use instead of the npm one.
ANVIL_ENV = "FEDSENTRY_ANVIL"
#: Env var that turns "node not installed" from a skip into a failure (CI sets it).
REQUIRE_ENV = "FEDSENTRY_REQUIRE_NODE"
#: anvil's default dev mnemonic; its accounts are funded with 10,000 ETH each.
ANVIL_MNEMONIC = "test test test test test test test test test test test junk"
ANVIL_CHAIN_ID = 31337
#: Same fork as py-evm's VM in eth-tester, so both backends run the contract alike.
ANVIL_HARDFORK = "prague"

_OS = {"linux": "linux", "darwin": "darwin", "win32": "win32"}
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def anvil_binary() -> Path | None:
    """Path of the anvil binary to run, or ``None`` when it is not installed.

    Looks at ``$FEDSENTRY_ANVIL``, then the npm platform package
    ``node_modules/@foundry-rs/anvil-<os>-<arch>/bin/anvil``, then the copy the package's
    postinstall script downloads when that optional dependency is missing.
    """
    override = os.environ.get(ANVIL_ENV)
    if override:
        return Path(override) if Path(override).is_file() else None
    name = "anvil.exe" if sys.platform == "win32" else "anvil"
    candidates = [NODE_MODULES / "@foundry-rs" / "anvil" / name]
    os_, arch = _OS.get(sys.platform), _ARCH.get(platform.machine().lower())
    if os_ and arch:
        candidates.insert(0, NODE_MODULES / "@foundry-rs" / f"anvil-{os_}-{arch}" / "bin" / name)
    return next((p for p in candidates if p.is_file() and os.access(p, os.X_OK)), None)


def dev_keys(n: int, mnemonic: str = ANVIL_MNEMONIC) -> list[str]:
    """Private keys of the first ``n`` accounts of ``mnemonic`` (``m/44'/60'/0'/0/i``)."""
    Account.enable_unaudited_hdwallet_features()
    return [
        Account.from_mnemonic(mnemonic, account_path=f"m/44'/60'/0'/0/{i}").key.to_0x_hex()
        for i in range(n)
    ]


def rpc_call(url: str, method: str, params: list[Any] | None = None, timeout: float = 5.0) -> Any:
    """One JSON-RPC request; returns ``result`` or raises ``RuntimeError`` on an RPC error."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params or []})
    req = urllib.request.Request(url, body.encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        reply = json.load(resp)
    if "error" in reply:
        raise RuntimeError(f"{method}: {reply['error']}")
    return reply["result"]


@dataclass
class AnvilNode:
    """A running anvil process and what is needed to use it.

    Attributes
    ----------
    url : str
        ``http://127.0.0.1:<port>``.
    keys : list of str
        Funded private keys (anvil's dev accounts, in order).
    proc : subprocess.Popen
        The anvil process (leader of its own process group).
    workdir : Path
        Temporary folder holding ``anvil.log``.
    """

    url: str
    keys: list[str]
    proc: subprocess.Popen[bytes]
    workdir: Path
    version: str = ""
    _stopped: bool = field(default=False, repr=False)

    @property
    def log(self) -> str:
        """anvil's output so far (for failure messages)."""
        return (self.workdir / "anvil.log").read_text(errors="replace")

    def chain(self, n_accounts: int | None = None) -> Chain:
        """A :class:`Chain` over this node signing with its first ``n_accounts`` dev keys."""
        keys = self.keys if n_accounts is None else self.keys[:n_accounts]
        return Chain.rpc(self.url, private_keys=keys, chain_id=ANVIL_CHAIN_ID)

    @contextmanager
    def fresh_state(self) -> Iterator[None]:
        """Run the body on a snapshot of the chain and revert to it afterwards (``evm_*``)."""
        snap = rpc_call(self.url, "evm_snapshot")
        try:
            yield
        finally:
            if not rpc_call(self.url, "evm_revert", [snap]):
                raise RuntimeError(f"anvil refused evm_revert to snapshot {snap}")

    def stop(self) -> None:
        """Terminate anvil's process group (SIGTERM, then SIGKILL) and remove its folder."""
        if self._stopped:
            return
        self._stopped = True
        if self.proc.poll() is None:
            _signal_group(self.proc, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _signal_group(self.proc, signal.SIGKILL)
                self.proc.wait(timeout=5)
        shutil.rmtree(self.workdir, ignore_errors=True)


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        if os.name == "posix":
            os.killpg(proc.pid, sig)  # start_new_session: the group id is anvil's pid
        else:
            proc.kill()
    except ProcessLookupError:
        pass


def start_anvil(
    binary: Path, n_accounts: int = 10, timeout: float = 30.0, hardfork: str = ANVIL_HARDFORK
) -> AnvilNode:
    """Start anvil on 127.0.0.1 (kernel-chosen port) and wait until it answers ``eth_chainId``.

    Raises
    ------
    RuntimeError
        anvil exited, did not start listening in ``timeout`` seconds, or serves other accounts
        than the derived dev keys.
    """
    workdir = Path(tempfile.mkdtemp(prefix="fedsentry-anvil-"))
    cmd = [
        str(binary),
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--chain-id",
        str(ANVIL_CHAIN_ID),
        "--accounts",
        str(n_accounts),
        "--mnemonic",
        ANVIL_MNEMONIC,
        "--hardfork",
        hardfork,
    ]
    with open(workdir / "anvil.log", "wb") as log:  # a file, not a pipe: anvil logs every tx
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=workdir,
        )
    node = AnvilNode(url="", keys=[], proc=proc, workdir=workdir)
    try:
        deadline = time.monotonic() + timeout
        while not node.url:
            match = re.search(r"Listening on 127\.0\.0\.1:(\d+)", node.log)
            if match:
                node.url = f"http://127.0.0.1:{match.group(1)}"
            elif proc.poll() is not None:
                raise RuntimeError(f"anvil exited with {proc.returncode}:\n{node.log[-2000:]}")
            elif time.monotonic() > deadline:
                raise RuntimeError(f"anvil did not listen within {timeout}s:\n{node.log[-2000:]}")
            else:
                time.sleep(0.02)
        while True:
            try:
                chain_id = int(rpc_call(node.url, "eth_chainId", timeout=1.0), 16)
                break
            except OSError as exc:
                if proc.poll() is not None or time.monotonic() > deadline:
                    msg = f"anvil does not answer at {node.url}: {exc}\n{node.log[-2000:]}"
                    raise RuntimeError(msg) from exc
                time.sleep(0.02)
        if chain_id != ANVIL_CHAIN_ID:
            raise RuntimeError(f"anvil reports chain id {chain_id}, expected {ANVIL_CHAIN_ID}")
        node.keys = dev_keys(n_accounts)
        served = [a.lower() for a in rpc_call(node.url, "eth_accounts")]
        derived = [Account.from_key(k).address.lower() for k in node.keys]
        if served != derived:
            raise RuntimeError(f"anvil serves accounts {served}, derived {derived}")
        node.version = rpc_call(node.url, "web3_clientVersion")
    except BaseException:
        node.stop()
        raise
    return node


@contextmanager
def anvil_or_skip(n_accounts: int = 10) -> Iterator[AnvilNode]:
    """A running anvil for the body, stopped afterwards; skips when anvil is not installed.

    With ``FEDSENTRY_REQUIRE_NODE=1`` a missing binary fails the test instead.  A binary that is
    present but does not start always fails.
    """
    binary = anvil_binary()
    if binary is None:
        where = os.environ.get(ANVIL_ENV) or f"{NODE_MODULES}/@foundry-rs/anvil-<os>-<arch>/bin"
        reason = f"anvil not installed (looked in {where}); run `npm install` at the repo root"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    node = start_anvil(binary, n_accounts=n_accounts)
    try:
        yield node
    finally:
        node.stop()
