"""The audit's run-wide checks of what the manifest and the run's end claim: the config the
audit replays with is the channel's (``channel-config``), and a finished run recorded every round
it planned (``round-count``); a run that did not finish gets a note instead.

The channel id is on chain (the contract holds it: ``contract-setup``) and every client's record
names it (``record-channel``); it is the SHA-256 of the run's config less its output and ledger
sections, its number of actors and Ray address (:func:`ledger.records.channel_of`), so a config
edited in the manifest (more rounds, another attack or learning rate) no longer hashes to it.
Only with the config proven is its number of rounds the number planned.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ledger.audit_input import AuditInputError
from ledger.records import channel_of, hx

Finding = tuple[int | None, int | None, str, Any, Any]


def config_channel(config: dict[str, Any]) -> str:
    """The channel id of a config as the manifest stores it (``0x``-hex)."""
    return hx(channel_of(config))


def channel_findings(manifest: dict[str, Any], seed: int) -> Iterator[Finding]:
    """``channel-config``: the manifest's config hashes to its channel id, and its account
    seed (from which every client key derives) is the config's ``seed`` and that channel."""
    want = config_channel(manifest["config"])
    if want != manifest["channel_id"]:
        yield (
            None,
            None,
            "channel-config",
            f"channel_id={manifest['channel_id']}",
            f"a config hashing to {want}",
        )
    account = f"{seed}:{manifest['channel_id'].removeprefix('0x')[:16]}"
    if manifest["account_seed"] != account:
        yield None, None, "channel-config", f"account_seed={account}", manifest["account_seed"]


def finished(run_dir: Path) -> bool:
    """Whether the run ended (a run writes ``summary.json`` last, once it has)."""
    return (run_dir / "summary.json").exists()


def planned_rounds(run_dir: Path, cfg: Any) -> int:
    """The rounds the run planned: its config's, or, where its virtual-time limit
    (``max_virtual_hours``) may have ended a finished run sooner, the rounds its summary says
    it ran (the ledger cannot tell where the virtual clock stood)."""
    rounds = int(cfg.experiment.rounds)
    if not cfg.experiment.max_virtual_hours or not finished(run_dir):
        return rounds
    path = run_dir / "summary.json"
    try:
        ran = json.loads(path.read_text()).get("rounds")
    except (OSError, ValueError, AttributeError) as exc:
        raise AuditInputError(f"{path}: unreadable: {exc}") from None
    if type(ran) is not int or not 0 <= ran <= rounds:
        raise AuditInputError(f"{path}: its 'rounds' is {ran!r}, not an integer from 0 to {rounds}")
    return ran


def round_count_findings(run_dir: Path, cfg: Any, recorded: int) -> Iterator[Finding]:
    """``round-count``: a finished run recorded the rounds it planned, and no run more; found
    at the first round missing (or the first beyond the plan)."""
    planned = planned_rounds(run_dir, cfg)
    if recorded > planned:
        yield planned, None, "round-count", f"{planned} rounds planned", f"{recorded} recorded"
    elif recorded < planned and finished(run_dir):
        yield (
            recorded,
            None,
            "round-count",
            f"{planned} rounds (the run finished: it wrote summary.json)",
            f"{recorded} recorded",
        )


def unfinished(run_dir: Path, rounds: int, planned: int) -> list[str]:
    """A note when the run stopped before its end (no ``summary.json``, which a run writes
    last): the audit covers the rounds it recorded, and ``--resume`` records the rest where the
    run saved a checkpoint."""
    if finished(run_dir):
        return []
    rest = (
        f"python -m simulator --resume {run_dir} records the rest"
        if (run_dir / "checkpoint.pt").is_file()
        else "it saved no checkpoint to resume from"
    )
    return [
        f"the run did not finish (no summary.json): {rounds} rounds recorded of the {planned} "
        f"planned, all of them audited; {rest}"
    ]
