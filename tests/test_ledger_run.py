"""Recording runs on FLChain: determinism, crash and resume, a real node, bad nodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import small_config
from ledger_nodes import AnvilNode, anvil_or_skip

from ledger.audit import audit_run
from ledger.audit import main as audit_main
from ledger.recorder import LedgerError, LedgerRoundError
from simulator.cli import main as sim_main
from simulator.output import read_events
from simulator.run import resume_config, run_experiment

ROUNDS = 4


def _ledger_config(out: Path, **kw):
    return small_config(out, rounds=ROUNDS, ledger=True, committee=1, defense="trimmedmean",
                        defense_params={"f": 1}, **kw)


def _globals(run: Path) -> list[str]:
    return [json.loads(x)["global_hash"]
            for x in (run / "ledger/rounds.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("straight") / "run"
    run_experiment(_ledger_config(out))
    return out


def test_same_seed_same_ledger(straight: Path, tmp_path: Path) -> None:
    run_experiment(_ledger_config(tmp_path / "again"))
    assert _globals(tmp_path / "again") == _globals(straight)
    # the embedded devnet is deterministic too: same blocks, same head hash
    head = json.loads((straight / "ledger/chain/head.json").read_text())
    assert json.loads((tmp_path / "again/ledger/chain/head.json").read_text()) == head
    # and recording does not change what is learned
    plain = small_config(tmp_path / "plain", rounds=ROUNDS, defense="trimmedmean",
                         defense_params={"f": 1})
    s = run_experiment(plain)
    assert s["final_accuracy"] == read_events(straight / "events.jsonl")[-1]["accuracy"]


def test_crash_then_resume_records_every_round_once(straight: Path, tmp_path: Path) -> None:
    out = tmp_path / "crashy"
    with pytest.raises(KeyboardInterrupt):
        run_experiment(_ledger_config(out), crash_after=2)
    assert len(_globals(out)) == 2
    run_experiment(resume_config(out))
    assert _globals(out) == _globals(straight)
    rep = audit_run(out, bls=False)
    assert rep.clean, rep.text()
    assert rep.rounds == ROUNDS


def test_resume_with_a_stateful_defense_keeps_the_committee_in_step(tmp_path: Path) -> None:
    # centered clipping carries momentum from round to round: after a resume the committee's
    # replay must have caught up, or it would refuse to attest the next round
    cfg = small_config(tmp_path / "cc", rounds=ROUNDS, ledger=True, committee=1,
                       defense="centeredclip")
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, crash_after=2)
    run_experiment(resume_config(tmp_path / "cc"))
    assert len(_globals(tmp_path / "cc")) == ROUNDS
    assert audit_run(tmp_path / "cc", bls=False).clean


def test_resume_with_a_broken_export_is_refused(straight: Path, tmp_path: Path) -> None:
    import shutil

    out = tmp_path / "broken"
    with pytest.raises(KeyboardInterrupt):
        run_experiment(_ledger_config(out), crash_after=2)
    shutil.rmtree(out / "ledger/chain")
    with pytest.raises(LedgerError, match="genesis.json"):
        run_experiment(resume_config(out))
    assert len(_globals(out)) == 2  # nothing lost


@pytest.fixture()
def anvil() -> AnvilNode:
    with anvil_or_skip(n_accounts=2) as node:
        yield node


@pytest.mark.integration
def test_run_on_anvil_then_audit(anvil: AnvilNode, tmp_path: Path,
                                 capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "rpc"
    s = run_experiment(_ledger_config(out, ledger_url=anvil.url, ledger_chain_id=31337))
    assert s["ledger"]["backend"] == "rpc"
    assert audit_main([str(out), "--no-bls"]) == 0
    with anvil_or_skip(n_accounts=1) as other:  # a node without the channel's contract
        capsys.readouterr()
        assert audit_main([str(out), "--ledger-url", other.url]) == 2
        assert "no contract at" in capsys.readouterr().err
    anvil.stop()
    capsys.readouterr()
    assert audit_main([str(out)]) == 2  # node gone: bad input, one line
    err = capsys.readouterr().err
    assert err.startswith("error: cannot reach JSON-RPC node") and err.count("\n") == 1


@pytest.mark.integration
def test_node_lost_mid_run_keeps_what_was_recorded(anvil: AnvilNode, tmp_path: Path) -> None:
    out = tmp_path / "lost"

    class KillNode:
        def on_round_end(self, sim, record) -> None:
            if record.round == 2:
                anvil.stop()

    cfg = _ledger_config(out, ledger_url=anvil.url)
    with pytest.raises(LedgerRoundError, match="round 2: lost the ledger node"):
        run_experiment(cfg, callbacks=[KillNode()])
    assert len(_globals(out)) == 2
    assert [e["round"] for e in read_events(out / "events.jsonl")] == [0, 1]
    assert (out / "checkpoint.pt").is_file()
    assert json.loads((out / "ledger/manifest.json").read_text())["backend"] == "rpc"


@pytest.mark.integration
def test_wrong_chain_id_and_unreachable_node_exit_2(anvil: AnvilNode, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture) -> None:
    base = ["--backend", "local", "--rounds", "1", "--no-progress", "--no-plots",
            "--num-clients", "4", "--clients-per-round", "2"]
    assert sim_main(base + ["--out", str(tmp_path / "a"), "--ledger-url", anvil.url,
                            "--ledger-chain-id", "1"]) == 2
    assert sim_main(base + ["--out", str(tmp_path / "b"), "--ledger-url",
                            "http://127.0.0.1:9"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2
    assert "has chain id 31337, expected 1" in lines[0]
    assert "cannot reach JSON-RPC node at http://127.0.0.1:9" in lines[1]
    assert not (tmp_path / "a/ledger/manifest.json").exists()


def test_stop_between_finalize_and_index_resumes(straight: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from ledger.recorder import LedgerRecorder

    out, real = tmp_path / "gap", LedgerRecorder._append

    def append_then_stop(self, e):  # the chain (and its export) got round 1, the index not
        if e["round"] == 1:
            self.exporter.flush()
            raise KeyboardInterrupt("stopped before indexing round 1")
        real(self, e)

    monkeypatch.setattr(LedgerRecorder, "_append", append_then_stop)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(_ledger_config(out))
    monkeypatch.setattr(LedgerRecorder, "_append", real)
    assert len(_globals(out)) == 1 and (out / "ledger/pending.json").is_file()
    run_experiment(resume_config(out))
    assert _globals(out) == _globals(straight)
    assert not (out / "ledger/pending.json").exists()
    assert audit_run(out, bls=False).clean


@pytest.mark.integration
def test_node_kept_part_of_a_round_then_resume(anvil: AnvilNode, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from ledger.chain import Chain

    out, real = tmp_path / "partial", Chain.send_batch

    def half_then_drop(self, calls):  # round 1: two submissions reach the node, then it drops
        if calls and calls[-1].label == "finalize" and len(self.gas_used("finalize")) == 1:
            real(self, calls[:2])
            raise ConnectionError("connection dropped")
        return real(self, calls)

    monkeypatch.setattr(Chain, "send_batch", half_then_drop)
    with pytest.raises(LedgerRoundError, match="round 1: lost the ledger node"):
        run_experiment(_ledger_config(out, ledger_url=anvil.url))
    monkeypatch.setattr(Chain, "send_batch", real)
    run_experiment(resume_config(out))
    assert len(_globals(out)) == ROUNDS
    rep = audit_run(out, bls=False)
    assert rep.clean, rep.text()
