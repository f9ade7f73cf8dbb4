"""Both Siren variants replay bit for bit through the ledger's replayer (ledger/replay.py).

The paper variant keeps its strikes and bans in the defense (replayed with it); the calibrated
variant keeps them in the client-state store and refuses banned clients before they train, so
the replayed aggregation sees exactly the recorded rows and alarms and needs no reputation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import small_config
from test_replay import BASE, PUBLIC, assert_replays, reasons, run

CASES: dict[str, tuple[dict[str, Any], set[str]]] = {
    # T = 4: one rejected row bans; the roll-back to the previous global model
    "paper": (
        {"seed": 2, "defense_params": {"rounds_total": 4, "variant": "paper"}},
        {"banned", "rollback"},
    ),
    # bans from the store (refused before training) and a roll-back opened by a confirmed
    # alarm (margins shrunk so that one happens in 4 rounds)
    "calibrated": (
        {"seed": 3, "defense_params": {"rounds_total": 4, "rollback": True, "z": 0.01, "cs": 0.01}},
        {"banned", "rollback", "abnormal-accuracy", "abnormal-cosine"},
    ),
}


@pytest.mark.parametrize("variant", sorted(CASES))
def test_siren_replays_bit_for_bit(variant: str, tmp_path: Path) -> None:
    overrides, want = CASES[variant]
    cfg = small_config(tmp_path, **{**BASE, **PUBLIC, "defense": "siren", **overrides})
    initial, cap = run(cfg)
    assert want <= reasons(cap), f"{variant}: the run did not exercise the case"
    assert_replays(cfg, initial, cap)
