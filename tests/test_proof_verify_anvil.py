"""``python -m ledger.proof RUN --verify FILE`` against a node restarted since the run: the
contract at the run's address is another channel's, which says nothing of tampering. Found by a
tester: a bare INVALID (a false tamper claim) where the audit notes the other channel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ledger_nodes import AnvilNode, anvil_or_skip, rpc_call
from ledger_run_helper import ledger_config

from ledger.proof import main as proof_main
from ledger.proof import receipt
from ledger.tamper_tools import pack_of
from simulator.run.experiment import run_experiment


@pytest.fixture(scope="module")
def anvil() -> AnvilNode:
    with anvil_or_skip(n_accounts=2) as node:
        yield node


@pytest.mark.integration
def test_a_receipt_on_a_restarted_node_cannot_be_verified_there(
    anvil: AnvilNode, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ours, path = tmp_path / "ours", tmp_path / "r.json"
    fresh = rpc_call(anvil.url, "evm_snapshot")  # the node as it starts
    run_experiment(ledger_config(ours, ledger_url=anvil.url))
    path.write_text(json.dumps(receipt(ours, 1, next(pack_of(ours, 1).clients("update")))))
    capsys.readouterr()
    assert proof_main([str(ours), "--verify", str(path)]) == 0
    assert capsys.readouterr().out == "VALID\n"
    assert rpc_call(anvil.url, "evm_revert", [fresh])  # "restarted": its state is gone
    run_experiment(ledger_config(tmp_path / "theirs", ledger_url=anvil.url, seed=1))
    capsys.readouterr()
    assert proof_main([str(ours), "--verify", str(path)]) == 2
    contract = json.loads((ours / "ledger/manifest.json").read_text())["contract"]
    io = capsys.readouterr()
    assert io.out == ""
    assert io.err == (
        f"error: {ours}: cannot verify the receipt: the contract at {contract} is another "
        "channel's (if the node was restarted since the run, it no longer holds this run's "
        "chain; --ledger-url if it moved)\n"
    )
