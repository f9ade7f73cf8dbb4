"""The audit's input: a malformed ``manifest.json`` or ``rounds.jsonl`` line is one line naming
the file, line and field (exit 2) and the other runs are audited all the same; an index line of
the right form whose values the chain or the pack contradict is a finding; the config the audit
replays with must be the channel's; a finished run must have recorded every round it planned.

Until this file, a manifest that was a JSON list or lacked its ``channel_id`` was a traceback
(exit 1, the findings code) that stopped a multi-run audit, an index line with ``"round": "1"``,
``"block": 99`` or another ``tx`` audited CLEAN, a config edited in the manifest went unnoticed
and so did a finished run's last round dropped from the index, the export and ``head.json``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ledger_run_helper import ROUNDS, ledger_config

from ledger.audit import audit_run, main
from ledger.audit_channel import channel_findings, planned_rounds, round_count_findings
from ledger.audit_input import AuditInputError
from ledger.tamper import CASES
from ledger.tamper_tools import entries, manifest, write_entries


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from simulator.run.experiment import run_experiment

    out = tmp_path_factory.mktemp("audit_input") / "run"
    run_experiment(ledger_config(out))
    return out


@pytest.fixture()
def run(recorded: Path, tmp_path: Path) -> Path:
    """A fresh copy of the recorded run to edit."""
    return Path(shutil.copytree(recorded, tmp_path / "run"))


def _edit_manifest(run: Path, edit: Callable[[dict[str, Any]], Any]) -> None:
    """Edit the manifest in place (an edit that returns a list: the manifest becomes it)."""
    m = manifest(run)
    out = edit(m)
    (run / "ledger/manifest.json").write_text(json.dumps(out if isinstance(out, list) else m))


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda m: [], "not a manifest (a JSON list)"),
        (lambda m: m.pop("channel_id"), "its 'channel_id' is missing"),
        (lambda m: m.pop("backend"), "its 'backend' is missing"),
        (lambda m: m.update(chain_id="abc"), "its 'chain_id' is \"abc\", not an integer >= 0"),
        (lambda m: m.update(chain_id=True), "its 'chain_id' is true, not an integer >= 0"),
        (lambda m: m.update(contract=7), "its 'contract' is 7, not an address"),
        (lambda m: m.update(onchain_bls=0), "its 'onchain_bls' is 0, not true or false"),
        (lambda m: m.update(initial_pack="0xAB"), "its 'initial_pack' is \"0xAB\", not lowercase"),
        (lambda m: m.update(compiler=[]), "its 'compiler' is [], not a JSON object"),
        (lambda m: m["committee"][1].pop("pop"), "its committee[1].'pop' is missing"),
        # until now AttributeError: 'NoneType' object has no attribute 'startswith' (exit 1)
        (lambda m: m.update(backend="rpc", url=None), "its 'url' is null, not an http(s):// URL"),
        # until now a contract-setup finding and a false round-on-chain "missing" every round
        (lambda m: m["committee"][0].update(pubkey="ab"), "its committee[0].'pubkey' is \"ab\""),
        (lambda m: m.update(config={"experiment": 5}), "its 'config' is invalid: config: sect"),
    ],
)
def test_a_malformed_manifest_is_one_line_and_the_other_runs_are_audited(
    run: Path, recorded: Path, edit: Callable, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _edit_manifest(run, edit)
    assert main([str(run), str(recorded), "-q", "--no-replay"]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"error: {run}/ledger/manifest.json: {says}") and err.count("\n") == 1
    assert f"{recorded}: {ROUNDS} rounds" in out and "CLEAN" in out


def _edit_line(run: Path, n: int, edit: Callable[[dict[str, Any]], Any]) -> None:
    """Edit line ``n`` of ``rounds.jsonl`` in place (an edit that returns a list: the line
    becomes it)."""
    es = entries(run)
    out = edit(es[n - 1])
    if isinstance(out, list):
        es[n - 1] = out
    write_entries(run, es)


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda e: e.pop("round"), "its 'round' is missing"),
        (lambda e: e.update(round=-1), "its 'round' is -1, not an integer >= 0"),
        (lambda e: e.update(round="1"), "its 'round' is \"1\", not an integer >= 0"),
        (lambda e: e.update(round=1.0), "its 'round' is 1.0, not an integer >= 0"),
        (lambda e: e.update(round=True), "its 'round' is true, not an integer >= 0"),
        (lambda e: e.update(block="three"), "its 'block' is \"three\", not an integer >= 0"),
        (lambda e: e.update(tx="0x12"), "its 'tx' is \"0x12\", not lowercase 0x-hex of 32 bytes"),
        (lambda e: e.update(signature=5), "its 'signature' is 5, not lowercase hex or null"),
        (lambda e: e.update(admitted="10"), "its 'admitted' is \"10\", not an integer >= 0 or"),
        (lambda e: e.update(note="x"), "an unknown field 'note' (a line holds round, pack, "),
        (lambda e: [e], "not an index line (a JSON list)"),
    ],
)
def test_a_malformed_index_line_is_one_line_naming_file_line_and_field(
    run: Path, edit: Callable, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _edit_line(run, 2, edit)
    with pytest.raises(AuditInputError, match="rounds.jsonl line 2: ") as info:
        audit_run(run)
    assert str(info.value).startswith(f"{run}/ledger/rounds.jsonl line 2: {says}")
    assert main([str(run), "-q"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_a_torn_or_bad_index_line(run: Path) -> None:
    index = run / "ledger/rounds.jsonl"
    lines = index.read_bytes().splitlines(keepends=True)
    index.write_bytes(b"".join(lines[:1]) + b"{not json\n" + b"".join(lines[2:]))
    with pytest.raises(AuditInputError, match=r"rounds.jsonl line 2: not JSON \(Expecting"):
        audit_run(run)
    # a torn last line (a kill mid-write: no newline) is left out, as a resume drops it: its
    # round is on chain but not indexed
    index.write_bytes(b"".join(lines[:-1]) + lines[-1][:40])
    found = {(f.round, f.check) for f in audit_run(run, replay=False).findings}
    assert found == {(ROUNDS - 1, "round-off-chain")}


@pytest.mark.parametrize(
    ("field", "edit"),
    [
        ("tx", lambda v: "0x" + "11" * 32),
        ("block", lambda v: 99),
        ("signers", lambda v: v ^ 1),
        ("submissions", lambda v: v + 1),
        ("admitted", lambda v: 0),
    ],
)
def test_an_index_value_the_chain_or_pack_contradicts_is_a_finding(
    run: Path, field: str, edit: Callable[[Any], Any]
) -> None:
    truth = entries(run)[0][field]
    value = edit(truth)
    assert value != truth
    _edit_line(run, 1, lambda e: e.update({field: value}))
    findings = audit_run(run, replay=False, bls=False).findings
    whose = " (the pack's)" if field in ("submissions", "admitted") else ""
    assert [(f.round, f.client, f.check, f.expected, f.found) for f in findings] == [
        (0, None, "commitment", f"{field}={truth}{whose}", f"{field}={value}")
    ]


def test_the_config_must_be_the_channels(recorded: Path) -> None:
    m = manifest(recorded)
    seed = m["config"]["experiment"]["seed"]
    assert list(channel_findings(m, seed)) == []
    edited = json.loads(json.dumps(m))
    edited["config"]["experiment"]["rounds"] += 1
    assert [f[2] for f in channel_findings(edited, seed)] == ["channel-config"]
    # the account seed every client key derives from is the config's seed and channel
    other = {**m, "account_seed": f"{seed + 1}:{m['channel_id'][2:18]}"}
    assert [f[3] for f in channel_findings(other, seed)] == [f"account_seed={m['account_seed']}"]


@pytest.mark.parametrize(
    ("section", "key", "value", "same"),
    [
        ("execution", "num_actors", 7, True),  # where a run trains is not what it learns
        ("execution", "ray_address", "10.0.0.1:6379", True),
        ("output", "out", "elsewhere", True),
        ("execution", "vectorize", False, False),
        ("execution", "placement", "ga", False),
        ("experiment", "seed", 1, False),
    ],
)
def test_the_channel_leaves_out_the_number_of_actors_only(
    recorded: Path, section: str, key: str, value: Any, same: bool
) -> None:
    from ledger.session_start import channel_id
    from simulator.run.experiment import resume_config

    cfg = resume_config(recorded)
    assert channel_id(cfg).hex() == manifest(recorded)["channel_id"].removeprefix("0x")
    base = cfg.replace(backend="ray")  # where an address means something
    edited = base.replace(**{key: value})
    assert getattr(getattr(edited, section), key) == value
    assert (channel_id(edited) == channel_id(base)) is same


def test_a_finished_run_recorded_every_round(run: Path) -> None:
    expected = CASES["last round dropped from index, export and head"](run, ROUNDS - 1)
    found = [(f.round, f.client, f.check) for f in audit_run(run, replay=False).findings]
    assert found == [expected] == [(ROUNDS - 1, None, "round-count")]
    # a run that did not finish audits clean over what it recorded, and says so
    (run / "summary.json").unlink()
    report = audit_run(run, replay=False)
    assert report.clean and f"{ROUNDS - 1} rounds recorded of the {ROUNDS} planned" in str(
        report.notes
    )


def _cfg(rounds: int, hours: float) -> Any:
    return SimpleNamespace(experiment=SimpleNamespace(rounds=rounds, max_virtual_hours=hours))


def test_rounds_planned_under_a_virtual_time_limit(tmp_path: Path) -> None:
    assert planned_rounds(tmp_path, _cfg(5, 2.0)) == 5  # not finished: the config's
    (tmp_path / "summary.json").write_text(json.dumps({"rounds": 3}))
    assert planned_rounds(tmp_path, _cfg(5, 0.0)) == 5  # no limit: the config's, always
    assert planned_rounds(tmp_path, _cfg(5, 2.0)) == 3  # the limit ended it after 3
    assert list(round_count_findings(tmp_path, _cfg(5, 2.0), 3)) == []
    assert [f[:3] for f in round_count_findings(tmp_path, _cfg(5, 2.0), 2)] == [
        (2, None, "round-count")
    ]
    assert [f[:3] for f in round_count_findings(tmp_path, _cfg(5, 0.0), 3)] == [
        (3, None, "round-count")
    ]
    assert [f[:3] for f in round_count_findings(tmp_path, _cfg(2, 0.0), 3)] == [
        (2, None, "round-count")  # more rounds than planned
    ]
    for bad in ('{"rounds": "3"}', '{"rounds": 6}', "[]", "{"):
        (tmp_path / "summary.json").write_text(bad)
        with pytest.raises(AuditInputError, match="summary.json: ") as info:
            planned_rounds(tmp_path, _cfg(5, 2.0))
        assert "\n" not in str(info.value)


def test_a_pack_cut_short_says_so(run: Path) -> None:
    """A pack file that lost its tail (a disk filled, a copy interrupted) reads as entries cut
    short, not as bytes that hash differently."""
    last = entries(run)[-1]
    path = run / "ledger/packs" / last["pack"].removeprefix("0x")
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    found = [(f.round, f.found) for f in audit_run(run, replay=False, bls=False).findings]
    assert found and {r for r, _ in found} == {last["round"]}
    cut = [what for _, what in found if "cut short" in what]
    assert len(cut) == 1, found
    assert cut[0].endswith(" bytes (the pack file is cut short)")
    got, size = (int(w) for w in cut[0].split()[:4:3])
    assert size - got == 10


def test_a_node_that_does_not_answer_is_one_line_naming_the_run(run: Path) -> None:
    _edit_manifest(run, lambda m: m.update(backend="rpc", url="http://127.0.0.1:1"))
    with pytest.raises(AuditInputError) as exc:
        audit_run(run, replay=False, bls=False)
    assert str(exc.value) == (
        f"{run}: cannot reach JSON-RPC node at http://127.0.0.1:1: [Errno 111] Connection "
        "refused (where it was recorded; --ledger-url if moved)"
    )


def test_a_manifest_key_of_no_point_is_one_finding_and_the_rounds_are_on_chain(run: Path) -> None:
    # until now the contract's setup read stopped at the key, before the Committed events were
    # read: a false round-on-chain "missing" for every round
    _edit_manifest(run, lambda m: m["committee"][0].update(pubkey="ff" * 48))
    found = audit_run(run, replay=False).findings
    assert [(f.round, f.check) for f in found] == [
        (None, "contract-setup"),
        (None, "committee-pop"),
    ] + [(r, "committee-signature") for r in range(ROUNDS)]
    assert found[0].expected.startswith("committee_key(0)=(the manifest's key is no G1 point: ")


def test_a_setup_that_cannot_be_read_still_reads_the_rounds(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ledger.audit_checks as checks

    def fail(pubkey: str) -> str:
        raise ValueError("no such key")

    monkeypatch.setattr(checks, "_g1", fail)
    found = audit_run(run, replay=False).findings
    assert [(f.round, f.check, f.expected, f.found) for f in found] == [
        (None, "contract-setup", "the FLChain v2 interface", "ValueError('no such key')")
    ]
