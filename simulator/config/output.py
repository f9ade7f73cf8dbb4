"""The configuration's sections about where a run goes: its output (directory, checkpoints,
resume, progress, plots) and its ledger (FLChain recording, the node, the committee).

:mod:`.system` holds the device population, the clock and execution; :mod:`.sections`
assembles the whole :class:`~simulator.config.sections.Config`.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from simulator.config.fields import ConfigError, check_positive, field_of


@dataclass(frozen=True)
class OutputConfig:
    out: str = field_of(
        "runs/latest", "output directory for events, summary, CSV, plots", metavar="DIR"
    )
    checkpoint_every: int = field_of(0, "save a checkpoint every N rounds (0 = never)")
    resume: str | None = field_of(
        None,
        "resume the run saved in this directory (with its own config; only --progress, "
        "--plots, --ray-address and --num-actors may be given with it)",
        metavar="DIR",
    )
    progress: bool = field_of(True, "show a progress bar")
    plots: bool = field_of(True, "write PNG plots at the end")

    def __post_init__(self) -> None:
        check_positive("output", self, ("checkpoint_every",), strict=False)
        if not self.out.strip():
            raise ConfigError("output.out: empty; give the directory the run writes into")
        if self.resume is not None and not self.resume.strip():
            raise ConfigError("output.resume: empty; give the directory of the run to resume")


#: validators a committee may have: the FLChain contract's ``MAX_COMMITTEE``
#: (``ledger/contracts/FLChain.vy``; a test holds the two equal)
MAX_COMMITTEE = 32


@dataclass(frozen=True)
class LedgerConfig:
    ledger: bool = field_of(
        False,
        "record every round on FLChain: updates, signatures, verdicts and global models "
        "(embedded devnet unless --ledger-url)",
    )
    ledger_url: str | None = field_of(
        None,
        "JSON-RPC node (http://...) to record on instead of the embedded devnet; implies "
        "--ledger. The aggregator key is read from $FEDSENTRY_LEDGER_KEY (default: the first "
        "anvil/hardhat dev account)",
    )
    ledger_chain_id: int | None = field_of(None, "expected chain id of --ledger-url (checked)")
    committee: int = field_of(
        4,
        "edge validators that re-derive each round's aggregate and sign it with BLS (0 = no "
        "committee attestation)",
    )

    def __post_init__(self) -> None:
        check_positive("ledger", self, ("committee",), strict=False)
        if self.committee > MAX_COMMITTEE:
            raise ConfigError(
                f"ledger.committee: at most {MAX_COMMITTEE} validators (the contract's "
                f"MAX_COMMITTEE), got {self.committee}"
            )
        if self.ledger_chain_id is not None:
            if self.ledger_url is None:
                raise ConfigError(
                    "ledger.ledger_chain_id: checks the chain of --ledger-url; give the URL too "
                    "(the embedded devnet's chain id is fixed)"
                )
            check_positive("ledger", self, ("ledger_chain_id",))
        if self.ledger_url is not None:
            try:
                url = urllib.parse.urlsplit(self.ledger_url)
                url.port  # noqa: B018 - raises on a port that is not a number
            except ValueError as exc:
                raise ConfigError(f"ledger.ledger_url: {self.ledger_url!r}: {exc}") from None
            if url.scheme not in ("http", "https") or not url.hostname:
                raise ConfigError(
                    f"ledger.ledger_url: must be http(s)://HOST[:PORT]..., got {self.ledger_url!r}"
                )

    @property
    def enabled(self) -> bool:
        return self.ledger or self.ledger_url is not None
