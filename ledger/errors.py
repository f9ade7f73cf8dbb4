"""The ledger's errors and names the driver needs without importing the chain stack."""

from __future__ import annotations

from pathlib import Path

#: the ledger format this FedSentry writes and reads (manifest["format"])
FORMAT = "fedsentry-ledger/3"


class LedgerError(RuntimeError):
    """The ledger cannot start (node unreachable, wrong chain id, no contract, bad export)."""


class LedgerRoundError(LedgerError):
    """Recording a round failed mid-run (node gone, transaction rejected, committee refused):
    the run stops with every earlier round recorded and a checkpoint to resume from."""


class LedgerChainLost(LedgerRoundError):
    """The node lost the run's chain mid-run (a devnet restarted): the rounds before it are in
    the run's ledger directory but not on the node, so the run cannot resume there."""


def ledger_dir(run_dir: str | Path) -> Path:
    """A run's ledger directory."""
    return Path(run_dir) / "ledger"
