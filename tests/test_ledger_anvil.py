"""Recording on a real node (anvil): on-chain BLS verification, a node lost mid-run, a wrong
chain id and an unreachable node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ledger_nodes import AnvilNode, anvil_or_skip
from ledger_run_helper import globals_of, ledger_config

from ledger.audit import audit_run
from ledger.audit import main as audit_main
from ledger.errors import LedgerError, LedgerRoundError
from simulator.cli import main as sim_main
from simulator.run.experiment import run_experiment


@pytest.fixture()
def anvil() -> AnvilNode:
    with anvil_or_skip(n_accounts=2) as node:
        yield node


@pytest.mark.integration
def test_robustness_task_on_anvil_verifies_on_chain_and_audits_clean(
    anvil: AnvilNode, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    import benchmarks.robustness_study.grid as grid
    from simulator.config.sections import build_config

    out = tmp_path / "rpc"
    flat = grid.resolve_scenario(grid.DEFAULT_SCENARIO, "digits", 3, {})
    flat.update(
        out=str(out),
        backend="local",
        progress=False,
        plots=False,
        ledger_url=anvil.url,
        ledger_chain_id=31337,
        defense="median",
        attack="labelflip",
        attack_fraction=0.2,
        committee=4,
    )
    s = run_experiment(build_config(flat=flat))
    assert s["ledger"]["backend"] == "rpc" and s["ledger"]["onchain_bls"] is True
    assert 200_000 < s["ledger"]["gas_per_round"] < 400_000  # the pairing check ran on chain
    assert audit_main([str(out)]) == 0
    assert audit_run(out).gas_per_round == s["ledger"]["gas_per_round"]  # the RPC event path
    with anvil_or_skip(n_accounts=1) as other:  # a node without the channel's contract
        capsys.readouterr()
        assert audit_main([str(out), "--ledger-url", other.url]) == 2
        assert "no contract at" in capsys.readouterr().err
    anvil.stop()
    capsys.readouterr()
    assert audit_main([str(out)]) == 2  # node gone: bad input, one line
    err = capsys.readouterr().err
    assert err.startswith(f"error: {out}: cannot reach JSON-RPC node") and err.count("\n") == 1
    assert err.endswith("Connection refused (where it was recorded; --ledger-url if moved)\n")


@pytest.mark.integration
def test_node_lost_mid_run_keeps_what_was_recorded(anvil: AnvilNode, tmp_path: Path) -> None:
    out = tmp_path / "lost"

    class KillNode:
        def on_round_end(self, sim, record) -> None:
            if record.round == 2:
                anvil.stop()

    cfg = ledger_config(out, ledger_url=anvil.url)
    with pytest.raises(LedgerRoundError, match="lost the ledger node|the ledger node failed"):
        run_experiment(cfg, callbacks=[KillNode()])
    recorded = len(globals_of(out))
    assert recorded >= 2
    import torch

    assert torch.load(out / "checkpoint.pt", weights_only=False)["next_round"] <= recorded
    assert json.loads((out / "ledger/manifest.json").read_text())["backend"] == "rpc"


@pytest.mark.integration
def test_wrong_chain_id_and_unreachable_node_exit_2(
    anvil: AnvilNode, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    base = [
        "--backend",
        "local",
        "--rounds",
        "2",
        "--no-progress",
        "--no-plots",
        "--num-clients",
        "4",
        "--clients-per-round",
        "2",
    ]
    assert (
        sim_main(
            base
            + ["--out", str(tmp_path / "a"), "--ledger-url", anvil.url, "--ledger-chain-id", "1"]
        )
        == 2
    )
    assert (
        sim_main(base + ["--out", str(tmp_path / "b"), "--ledger-url", "http://127.0.0.1:9"]) == 2
    )
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2
    assert "has chain id 31337, expected 1" in lines[0]
    assert "cannot reach JSON-RPC node at http://127.0.0.1:9" in lines[1]
    assert not (tmp_path / "a/ledger/manifest.json").exists()


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.integration
def test_a_resume_on_a_restarted_node_is_refused_and_changes_nothing(
    anvil: AnvilNode, tmp_path: Path
) -> None:
    # found at stop 50: a run stopped when its anvil died, resumed after anvil restarted and
    # another run deployed at the same address (anvil's first contract always lands there),
    # got that run's rounds appended to its rounds.jsonl, and its events.jsonl cut back; a
    # refused resume of a finished run lost its summary.json
    from ledger_nodes import rpc_call

    from simulator.run.experiment import resume_config

    ours = tmp_path / "ours"
    fresh = rpc_call(anvil.url, "evm_snapshot")  # the node as it starts
    with pytest.raises(KeyboardInterrupt):
        run_experiment(ledger_config(ours, ledger_url=anvil.url), crash_after=3)
    assert rpc_call(anvil.url, "evm_revert", [fresh])  # "restarted": its state is gone
    run_experiment(ledger_config(tmp_path / "theirs", ledger_url=anvil.url, seed=1))
    before = _files(ours)
    with pytest.raises(LedgerError, match="the contract at 0x.* is not this run's"):
        run_experiment(resume_config(ours))
    assert _files(ours) == before
    rep = audit_run(ours)  # its findings are not this run's tampering: a note says so
    assert not rep.clean and any(
        "is another channel's: if the node was restarted" in n for n in rep.notes
    )
    done = tmp_path / "done"
    run_experiment(ledger_config(done, ledger_url=anvil.url, seed=2))
    anvil.stop()
    before = _files(done)
    with pytest.raises(LedgerError, match="cannot reach JSON-RPC node"):
        run_experiment(resume_config(done))
    assert _files(done) == before and (done / "summary.json").is_file()


@pytest.mark.integration
def test_a_node_restarted_mid_run_stops_it_at_once_saying_it_cannot_resume_there(
    anvil: AnvilNode, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    # found at stop 50: the next commit's transaction (a nonce the restarted node had not
    # reached) stayed queued for web3's whole 120 s wait, and the run then said to --resume,
    # which the node, without the run's contract, cannot take
    import time

    from ledger_nodes import rpc_call

    from ledger.errors import LedgerChainLost

    fresh = rpc_call(anvil.url, "evm_snapshot")

    class Restart:
        def on_round_end(self, sim, record) -> None:
            if record.round == 1:  # round 0 is on the node (its checkpoint waited for it)
                assert rpc_call(anvil.url, "evm_revert", [fresh])  # "restarted"

    out = tmp_path / "restarted"
    t0 = time.monotonic()
    with pytest.raises(LedgerChainLost, match=r"round 1: the node counts 0 transactions of 0x"):
        run_experiment(ledger_config(out, ledger_url=anvil.url), callbacks=[Restart()])
    assert time.monotonic() - t0 < 60  # not web3's 120 s wait
    assert len(globals_of(out)) == 1
