"""Shared by the ledger run tests: a small recorded run's config and its rounds' global hashes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import small_config

ROUNDS = 4


def ledger_config(out: Path, **kw: Any) -> Any:
    """A 4-round local run recorded on the embedded devnet (committee of 3, trimmed mean)."""
    return small_config(
        out,
        rounds=ROUNDS,
        ledger=True,
        committee=3,
        defense="trimmedmean",
        defense_params={"f": 1},
        checkpoint_every=1,
        **kw,
    )


def globals_of(run: Path) -> list[str]:
    """The global-model hash of every recorded round, from the ledger's index."""
    return [
        json.loads(x)["global_hash"] for x in (run / "ledger/rounds.jsonl").read_text().splitlines()
    ]
