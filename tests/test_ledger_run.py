"""Recording runs on FLChain (ledger v2): determinism, the recorder process, crash, a full disk
and resume, an old ledger format (a real node: ``test_ledger_anvil.py``)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from conftest import small_config
from ledger_run_helper import ROUNDS, globals_of, ledger_config

from ledger.audit import audit_run
from ledger.audit import main as audit_main
from ledger.errors import LedgerError, LedgerRoundError
from ledger.host import RecorderHost
from simulator.run.appendlog import FAILPOINT_ENV
from simulator.run.experiment import resume_config, run_experiment
from simulator.run.output import read_events


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("straight") / "run"
    return out, run_experiment(ledger_config(out))


def test_same_seed_same_ledger_one_transaction_a_round(straight, tmp_path: Path) -> None:
    out, summary = straight
    lg = summary["ledger"]
    assert lg["rounds"] == ROUNDS and lg["backend"] == "embedded" and not lg["onchain_bls"]
    assert 0 <= lg["recorder_lag_max"] <= 2
    entries = [json.loads(x) for x in (out / "ledger/rounds.jsonl").read_text().splitlines()]
    assert [e["block"] for e in entries] == [2, 3, 4, 5]  # deploy, then one block per round
    run_experiment(ledger_config(tmp_path / "again"))
    assert globals_of(tmp_path / "again") == globals_of(out)
    head = json.loads((out / "ledger/chain/head.json").read_text())
    assert json.loads((tmp_path / "again/ledger/chain/head.json").read_text()) == head
    # one pack a round (and the initial model's), not two files per client
    assert len(list((out / "ledger/packs").iterdir())) == ROUNDS + 1
    # recording does not change what is learned
    plain = small_config(
        tmp_path / "plain", rounds=ROUNDS, defense="trimmedmean", defense_params={"f": 1}
    )
    assert run_experiment(plain)["final_accuracy"] == summary["final_accuracy"]


def test_the_disk_estimate_covers_the_packs_written(straight) -> None:
    """The budget's estimate of the packs is an upper bound within 2x of what was written;
    resuming a finished run counts nothing more."""
    from simulator.run.budget import estimate

    out, _ = straight
    written = sum(p.stat().st_size for p in (out / "ledger/packs").iterdir())
    est = estimate(ledger_config(out)).ledger
    assert written <= est <= 2 * written, (written, est)
    assert estimate(resume_config(out)).ledger == 0


def test_crash_then_resume_records_every_round_once(straight, tmp_path: Path) -> None:
    out = tmp_path / "crashy"
    with pytest.raises(KeyboardInterrupt):
        run_experiment(ledger_config(out), crash_after=2)
    assert len(globals_of(out)) == 2  # what was handed over is recorded before the run stops
    # resumed elsewhere (another --num-actors, which the config's channel id counts): the
    # recorder goes on in the run's own channel (it signed in another one, audited with
    # record-channel, signature and committee-signature findings)
    run_experiment(resume_config(out).replace(num_actors=3))
    assert globals_of(out) == globals_of(straight[0])
    rep = audit_run(out)
    assert rep.clean, rep.text()
    assert rep.rounds == ROUNDS


def test_resume_with_a_stateful_defense_keeps_the_committee_in_step(tmp_path: Path) -> None:
    # centered clipping carries momentum from round to round: after a resume the committee's
    # replay must have caught up, or it would refuse to attest the next round
    cfg = small_config(
        tmp_path / "cc",
        rounds=ROUNDS,
        ledger=True,
        committee=1,
        defense="centeredclip",
        checkpoint_every=1,
    )
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, crash_after=2)
    run_experiment(resume_config(tmp_path / "cc"))
    assert len(globals_of(tmp_path / "cc")) == ROUNDS
    assert audit_run(tmp_path / "cc", bls=False).clean


def test_extras_are_recorded_with_their_rows_and_replayed(tmp_path: Path) -> None:
    """SCAFFOLD's clients send their control-variate change as an extra: each update entry
    holds the row, then the extras blob (its hash covers both); a crash and resume (the
    committee catches up through the packs, extras included) audits clean."""
    from ledger.pack import Pack
    from ledger.pack_rows import rows_of_pack
    from ledger.records import update_prefix
    from ledger.store import decode
    from simulator.round.engine import Simulation

    out = tmp_path / "scaffold"
    cfg = small_config(
        out, rounds=ROUNDS, ledger=True, committee=1, algorithm="scaffold", checkpoint_every=1
    )
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, crash_after=2)
    run_experiment(resume_config(out))
    rep = audit_run(out, bls=False)
    assert rep.clean and rep.rounds == ROUNDS, rep.text()
    sim = Simulation(cfg)
    size = sim.space.size
    sim.close()
    line = json.loads((out / "ledger/rounds.jsonl").read_text().splitlines()[-1])
    pack = Pack.read(out / "ledger", bytes.fromhex(line["pack"].removeprefix("0x")))
    extras: dict = {}
    rows, ids = rows_of_pack(pack, size, extras)
    assert sorted(extras) == sorted(ids) and len(ids) > 0
    c = ids[0]
    raw = bytes(pack.raw(f"update/{c}"))
    tail = decode(raw[len(update_prefix(size)) + 4 * size :])
    assert sorted(tail) == ["delta_c"] and tail["delta_c"].shape == (size,)


def test_resume_with_a_broken_export_is_refused(tmp_path: Path) -> None:
    import shutil

    out = tmp_path / "broken"
    with pytest.raises(KeyboardInterrupt):
        run_experiment(ledger_config(out), crash_after=2)
    shutil.rmtree(out / "ledger/chain")
    with pytest.raises(LedgerError, match="genesis.json"):
        run_experiment(resume_config(out))
    assert len(globals_of(out)) == 2  # nothing lost


def test_an_older_ledger_format_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "v1"
    with pytest.raises(KeyboardInterrupt):
        run_experiment(ledger_config(out), crash_after=1)
    m = json.loads((out / "ledger/manifest.json").read_text())
    (out / "ledger/manifest.json").write_text(json.dumps({**m, "format": "fedsentry-ledger/1"}))
    with pytest.raises(
        LedgerError,
        match="ledger format 'fedsentry-ledger/1'; this FedSentry reads 'fedsentry-ledger/3'",
    ):
        run_experiment(resume_config(out))
    assert audit_main([str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'fedsentry-ledger/1'" in err


def _fresh_host(monkeypatch: pytest.MonkeyPatch, failpoint: str | None) -> None:
    """The next run gets a new recorder process (with ``failpoint`` in its environment)."""
    if RecorderHost._current is not None:
        RecorderHost._current.stop()
    if failpoint is None:
        monkeypatch.delenv(FAILPOINT_ENV, raising=False)
    else:
        monkeypatch.setenv(FAILPOINT_ENV, failpoint)


@pytest.mark.parametrize(
    "failpoint",  # the first in the default suite, the others slow (~10 s each; CI runs them)
    [
        "rounds.jsonl:2",
        pytest.param("blocks.rlp:3", marks=pytest.mark.slow),
        pytest.param("rounds.jsonl:3:after", marks=pytest.mark.slow),
    ],
)
def test_recorder_killed_mid_write_then_resume(
    straight, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failpoint: str
) -> None:
    # the recorder process dies by SIGKILL in the middle of a write (a torn last line of
    # rounds.jsonl, a torn last block of the export) or between two rounds; the run stops with
    # one line, its checkpoint is never ahead of the ledger, and --resume finishes it
    out = tmp_path / "killed"
    _fresh_host(monkeypatch, failpoint)
    try:
        with pytest.raises(LedgerRoundError, match="recorder process exited with code -9"):
            run_experiment(ledger_config(out))
    finally:
        _fresh_host(monkeypatch, None)
    import torch

    st = torch.load(out / "checkpoint.pt", weights_only=False)
    text = (out / "ledger/rounds.jsonl").read_bytes()
    assert st["next_round"] <= text.count(b"\n")
    run_experiment(resume_config(out))
    assert globals_of(out) == globals_of(straight[0])
    rep = audit_run(out)
    assert rep.clean, rep.text()
    assert [e["round"] for e in read_events(out / "events.jsonl")] == list(range(ROUNDS))


@pytest.mark.parametrize("failpoint", ["blocks.rlp:3:enospc", "rounds.jsonl:2:enospc"])
def test_a_full_disk_under_the_recorder_then_resume(
    straight, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failpoint: str
) -> None:
    # the disk fills halfway through a write of the recorder's: the run stops with one line
    # naming the file, the recorder lets go of the ledger's lock (so this same process can
    # resume it), and --resume finishes a run that audits clean
    out = tmp_path / "full"
    name = failpoint.split(":")[0]
    _fresh_host(monkeypatch, failpoint)
    try:
        with pytest.raises(OSError) as err:  # a full disk, as the driver's own writes see it
            run_experiment(ledger_config(out))
        assert err.value.errno == errno.ENOSPC
        assert out / "ledger" in Path(err.value.filename).parents
        assert Path(err.value.filename).name == name
        # the failed run's shared-memory slots are gone (no leak for Python to warn of)
        assert not list(Path("/dev/shm").glob(f"fsrec{os.getpid()}-*"))
        assert not _memory_files()  # nor any of its memory files (ledger.slots.MemSlot)
        run_experiment(resume_config(out))  # the same recorder process (its failpoint is spent)
    finally:
        _fresh_host(monkeypatch, None)
    assert globals_of(out) == globals_of(straight[0])
    rep = audit_run(out)
    assert rep.clean, rep.text()
    assert [e["round"] for e in read_events(out / "events.jsonl")] == list(range(ROUNDS))


def test_no_recorder_is_left_behind() -> None:
    # the recorder dies with its driver: PR_SET_PDEATHSIG is set on Linux
    h = RecorderHost.get()
    h.wait_ready()
    assert h.proc.poll() is None and os.getpid() == h.owner


def _memory_files() -> list[str]:
    """This process's open slot memory files (``/memfd:fsrec...``)."""
    links = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the descriptor of the listing itself, closed by now
            pass
    return [link for link in links if link.startswith("/memfd:fsrec")]
