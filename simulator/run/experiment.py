"""Running one experiment end to end with its outputs, checkpoints and resume."""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import yaml

from simulator.config.fields import ConfigError
from simulator.config.sections import Config, load_config
from simulator.round.engine import Simulation
from simulator.round.types import RoundCallback, RoundRecord
from simulator.run.budget import check_budget
from simulator.run.output import EventLog, RunSummary, event_json, truncate_events, write_csv
from simulator.run.plots import plot
from simulator.run.runlock import lock_run_dir
from simulator.run.watch import NonFiniteWatch, warn_untrained_global

log = logging.getLogger("fedsentry")


def resume_config(run_dir: str | Path) -> Config:
    """The config saved in a run directory, set to resume it in place."""
    d = Path(run_dir)
    if not (d / "config.yaml").is_file():
        raise ConfigError(f"output.resume: {d} has no config.yaml (not a FedSentry run dir)")
    if not (d / "checkpoint.pt").is_file():
        raise ConfigError(
            f"output.resume: {d} has no checkpoint.pt (run it with --checkpoint-every N)"
        )
    cfg = load_config(d / "config.yaml")
    return cfg.replace(out=str(d), resume=str(d))


#: what a resumed run may be told: how it shows, and where its actors run (a run's results
#: do not depend on the Ray cluster or the number of actors; a restarted cluster has another
#: address, and one that lost a node may hold fewer actors)
SHOWN = ("progress", "plots", "ray_address", "num_actors")
#: the fields a resumed run may differ in from the run it resumes, by section: where it is,
#: how it shows, where it trains
_WHERE = {"output": ("out", "resume", "progress", "plots"), "execution": SHOWN[2:]}


def config_identity(cfg: Config) -> dict[str, dict[str, Any]]:
    """What a run computes from (its config less :data:`_WHERE`), as YAML reads it back: saved
    in every checkpoint, so a resume checks ``config.yaml`` against it."""
    d = cfg.to_dict()
    for sec, keys in _WHERE.items():
        for k in keys:
            d[sec].pop(k, None)
    return yaml.safe_load(yaml.safe_dump(d, sort_keys=False))


def check_same_config(st: dict[str, Any], cfg: Config, out: Path) -> None:
    """Refuse (one line) a checkpoint that is not of the run ``config.yaml`` describes: another
    run's ``checkpoint.pt`` copied in, or ``config.yaml`` edited, emptied or cut short (its
    missing fields would silently take their defaults). A checkpoint written before stop 50
    holds no config and is not checked."""
    saved, now = st.get("config"), config_identity(cfg)
    if saved is None:
        return
    for sec, keys in _WHERE.items():  # (a checkpoint written when fewer were left out)
        for k in keys:
            saved.get(sec, {}).pop(k, None)
    if saved == now:
        return
    sec, key = next(
        (sec, k)
        for sec in [*now, *(s for s in saved if s not in now)]  # in the config's order
        for k in [*now.get(sec, {}), *(k for k in saved.get(sec, {}) if k not in now.get(sec, {}))]
        if saved.get(sec, {}).get(k, "(none)") != now.get(sec, {}).get(k, "(none)")
    )
    raise ConfigError(
        f"output.resume: {out / 'config.yaml'} does not match its checkpoint.pt ({sec}.{key} "
        f"is {now.get(sec, {}).get(key, '(none)')!r} there, {saved[sec].get(key, '(none)')!r} "
        "in the checkpoint): the checkpoint is another run's, or config.yaml was changed; "
        "restore the run's own files to resume it"
    )


def load_checkpoint(path: Path) -> dict[str, Any]:
    """A run's checkpoint; :class:`ConfigError` in one line when it cannot be read (checkpoints
    are written whole and renamed into place: one that does not load was damaged afterwards,
    e.g. by a copy cut short)."""
    try:
        return torch.load(path, weights_only=False)
    except Exception as exc:  # noqa: BLE001 - torch raises OSError, RuntimeError, EOFError...
        why = (str(exc).splitlines() or [""])[0]
        why = why if len(why) <= 120 else why[:120].rsplit(" ", 1)[0] + " ..."
        raise ConfigError(
            f"output.resume: {path} cannot be read ({type(exc).__name__}: {why}); the run "
            "cannot resume from it"
        ) from None


def _none() -> None:
    """No ledger to open."""


def open_run(
    sim: Simulation,
    cfg: Config,
    out: Path,
    summary: RunSummary,
    start_ledger: Callable[[], None] = _none,
) -> None:
    """Resume ``sim`` from the run directory's checkpoint (dropping events past it), or start
    the directory afresh: an empty event log, the resolved config and, with checkpoints on, a
    round-0 checkpoint (a run killed before its first checkpoint resumes from round 0). Either
    way an earlier ``summary.json`` goes: one is there only once this run has finished.
    ``start_ledger`` opens the run's ledger: on a resume before anything here changes (a
    ledger that refuses, its node gone or another chain, leaves the directory as it was), on
    a fresh run once the directory is started."""
    events_path = out / "events.jsonl"
    out.mkdir(parents=True, exist_ok=True)
    if cfg.output.resume:
        # everything is read and checked first: a resume refused (a damaged checkpoint, store
        # file or log, another run's checkpoint) leaves the directory as it was
        st = load_checkpoint(out / "checkpoint.pt")
        check_same_config(st, cfg, out)
        sim.load_state_dict(st, out / "state" / "checkpoint")
        summary.load_state_dict(st["summary"])
        start_ledger()
        truncate_events(events_path, sim.next_round)
        log.info("resuming %s at round %d", out, sim.next_round)
    else:
        events_path.write_text("")
        # an earlier run's ledger or checkpoint is not this one's (found at stop 57: a run
        # without --ledger into a ledger run's --out left its ledger/, which audited CLEAN)
        if not cfg.ledger.enabled:
            shutil.rmtree(out / "ledger", ignore_errors=True)
        if not cfg.output.checkpoint_every:
            (out / "checkpoint.pt").unlink(missing_ok=True)
            shutil.rmtree(out / "state" / "checkpoint", ignore_errors=True)
        cfg.replace(resume=None).save(out / "config.yaml")
        if cfg.output.checkpoint_every:
            sim.save_checkpoint(out, 0.0, summary=summary.state_dict(), config=config_identity(cfg))
        start_ledger()
    # an earlier run's summary is not this one's: a directory has one only once its run ends
    (out / "summary.json").unlink(missing_ok=True)


def round_writer(
    sim: Simulation,
    cfg: Config,
    out: Path,
    events: EventLog,
    summary: RunSummary,
    recorder: Any,
    crash_after: int | None,
) -> Callable[[RoundRecord], None]:
    """What happens after each round: its event, the summary, and every ``checkpoint_every``
    rounds the ledger's flush and a checkpoint (``crash_after`` rounds: a simulated crash)."""
    every = cfg.output.checkpoint_every
    done, ident = 0, config_identity(cfg)

    def on_record(rec: RoundRecord) -> None:
        # the event is written first, then the checkpoint: a checkpoint never runs ahead
        # of the log, so a resumed run rewrites nothing it lost
        nonlocal done
        event = rec.to_event()
        events.write(event)
        summary.add(event)
        if every and (rec.round + 1) % every == 0:
            if recorder is not None:  # the ledger is never behind the checkpoint
                recorder.flush(rec.round)
            sim.save_checkpoint(out, rec.wall_time, summary=summary.state_dict(), config=ident)
        done += 1
        if crash_after is not None and done >= crash_after:
            raise KeyboardInterrupt("simulated crash")

    return on_record


def write_results(
    sim: Simulation,
    cfg: Config,
    out: Path,
    summary: RunSummary,
    seconds: float,
    ledger_summary: dict[str, Any] | None,
) -> dict[str, Any]:
    """The run's summary (``summary.json``), its metrics CSV and plots; returns the summary."""
    result = summary.to_dict()
    result["run_seconds"] = seconds
    result["out"] = str(out)
    result["state_store"] = {
        "clients": sim.store.count(),
        "memory_bytes": sim.store.memory_bytes_used,
        "disk_bytes": sim.store.disk_bytes_used,
    }
    if ledger_summary is not None:
        result["ledger"] = ledger_summary
    nodes = getattr(sim.executor, "actor_nodes", list)()  # empty unless Ray actors started
    if nodes:  # how many Ray nodes the actors ran on, and each actor's (short) node id
        result["actor_nodes"] = len(set(nodes))
        result["actor_node_ids"] = [n[:12] for n in nodes]
    # NaN as null, as in events.jsonl: a diverged run's final_loss was a bare NaN, not JSON
    (out / "summary.json").write_text(event_json(result, indent=2))
    write_csv(out / "metrics.csv", summary.series)
    if cfg.output.plots:
        plot(
            out,
            summary.series,
            title=f"{cfg.algorithm.algorithm} / {cfg.defense.defense} on {cfg.data.dataset}",
        )
    return result


def run_experiment(
    cfg: Config,
    callbacks: Sequence[RoundCallback] = (),
    federation: Any = None,
    executor: Any = None,
    progress: bool | None = None,
    crash_after: int | None = None,
) -> dict[str, Any]:
    """Run ``cfg`` and write its outputs into ``cfg.output.out``; returns the summary.

    ``crash_after`` stops abruptly after that many rounds (tests of checkpoint/resume).
    """
    out = Path(cfg.output.out)
    check_budget(cfg)  # a run that cannot fit stops here, before anything starts
    if cfg.ledger.ledger_url is not None:  # so does a node that is not there
        from ledger.node_probe import probe_node

        probe_node(cfg.ledger.ledger_url, cfg.ledger.ledger_chain_id)
    lock = lock_run_dir(out)  # before anything is written: a second run here is refused
    try:
        return _run_locked(cfg, out, callbacks, federation, executor, progress, crash_after)
    finally:
        os.close(lock)


def _run_locked(
    cfg: Config,
    out: Path,
    callbacks: Sequence[RoundCallback],
    federation: Any,
    executor: Any,
    progress: bool | None,
    crash_after: int | None,
) -> dict[str, Any]:
    """:func:`run_experiment` once it holds the run directory's lock."""
    for stale in (out / "state" / "spill").glob("clientstore-*"):  # a kill -9 skips their
        shutil.rmtree(stale, ignore_errors=True)  # cleanup; under the lock none is in use
    callbacks = [*callbacks, NonFiniteWatch()]
    recorder = None
    if cfg.ledger.enabled:  # the recorder process starts while the simulation is built
        from ledger.recorder import LedgerRecorder

        recorder = LedgerRecorder(cfg, out)
        callbacks = [*callbacks, recorder]
    try:
        sim = Simulation(cfg, callbacks, federation=federation, executor=executor)
    except BaseException:
        if recorder is not None:
            recorder.close(flush=False)
        raise
    warn_untrained_global(cfg, sim.algorithm)
    summary = RunSummary()
    try:
        # the ledger deploys while round 0 trains (a resume waits for it)
        open_run(sim, cfg, out, summary, (lambda: recorder.start(sim)) if recorder else _none)
        events = EventLog(out / "events.jsonl")
        t0 = time.perf_counter()
        on_record = round_writer(sim, cfg, out, events, summary, recorder, crash_after)
        show = cfg.output.progress if progress is None else progress
        try:
            sim.run(progress=show, on_record=on_record)
        finally:
            events.close()
        ledger_summary = recorder.close() if recorder is not None else None  # every round in
        return write_results(sim, cfg, out, summary, time.perf_counter() - t0, ledger_summary)
    finally:
        sim.close()
        if recorder is not None and not recorder.closed:
            try:  # a failing run: what was handed over is still recorded
                recorder.close()
            except Exception as exc:  # noqa: BLE001 - the run's own error matters more
                log.warning("ledger: %s", str(exc).splitlines()[0])
