"""The checks of :mod:`ledger.audit`, one run directory at a time (ledger v2).

Each failed check is yielded as ``(round, client, check, expected, found)``. Input that makes an
audit impossible (no manifest, another ledger format, unreadable config, node unreachable, wrong
chain id, no contract at the address, a ``--ledger-url`` for a run recorded on the embedded
devnet) raises :class:`AuditInputError` instead: that is exit status 2, not a finding.

Order: the chain (re-imported with full block validation, or read from the node), the contract
(code and setup), the committee's proofs of possession, the index against the chain's
``Committed`` events; then every round's pack in one pass (:func:`ledger.audit_round.check_pack`,
in parallel with ``jobs``), the cross-round checks (admission, client signatures, base models),
the replay of the aggregation (:mod:`ledger.replay`) and the committee signatures, batched
(:mod:`ledger.audit_committee`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ledger.attestation import verify_registration
from ledger.audit_committee import committee_findings
from ledger.audit_round import Commitment, check_packs
from ledger.chain_events import event_logs
from ledger.commitment import g1_eip2537, g2_compress_eip2537
from ledger.errors import FORMAT
from ledger.records import DEV_KEY, hx
from simulator.run.appendlog import CorruptLogError, read_jsonl

Finding = tuple[int | None, int | None, str, Any, Any]


class AuditInputError(ValueError):
    """The run directory or the node cannot be audited at all (exit status 2)."""


class RunAudit:
    """Audit state of one run directory; :meth:`run` yields the findings."""

    def __init__(self, run_dir: Path, ledger_url: str | None = None) -> None:
        self.dir = run_dir / "ledger"
        self.ledger_url = ledger_url
        m = self.dir / "manifest.json"
        if not m.is_file():
            raise AuditInputError(f"{run_dir}: no ledger/manifest.json (not a --ledger run)")
        try:
            self.manifest = json.loads(m.read_text())
        except (OSError, ValueError) as exc:
            raise AuditInputError(f"{run_dir}: ledger/manifest.json unreadable: {exc}") from None
        if self.manifest.get("format") != FORMAT:
            raise AuditInputError(
                f"{run_dir}: ledger format {self.manifest.get('format')!r}; "
                f"this audit reads {FORMAT!r} (record the run again)"
            )
        if ledger_url is not None and self.manifest.get("backend") == "embedded":
            raise AuditInputError(
                f"{run_dir} was recorded on the embedded devnet (its chain is in "
                f"{self.dir / 'chain'}); --ledger-url applies to runs recorded on a node"
            )
        if not (self.dir / "rounds.jsonl").is_file():
            raise AuditInputError(f"{run_dir}: ledger/rounds.jsonl is missing")
        try:
            self.entries = read_jsonl(self.dir / "rounds.jsonl")
        except (OSError, CorruptLogError) as exc:
            raise AuditInputError(f"{run_dir}: ledger/rounds.jsonl unreadable: {exc}") from None
        from simulator.config.fields import ConfigError
        from simulator.config.sections import build_config

        try:
            self.cfg = build_config(self.manifest["config"])
        except (ConfigError, KeyError) as exc:
            raise AuditInputError(f"{run_dir}: manifest config invalid: {exc}") from None
        self.channel = self.manifest["channel_id"]
        self.contract = self.manifest["contract"]
        self.chain_id = int(self.manifest["chain_id"])
        self.rounds_checked = self.submissions = 0
        self.notes: list[str] = []
        self.gas_per_round: float | None = None
        self.events: dict[int, Commitment] = {}

    # -- chain -----------------------------------------------------------------------------
    def open_chain(self) -> Iterator[Finding]:
        self.chain: Any = None
        self.chain_ends: int | None = None  # first round the (re-imported) chain cannot show
        if self.manifest["backend"] == "embedded":
            from ledger.devnet import ChainExportError
            from ledger.devnet_import import import_chain

            try:
                res = import_chain(self.dir / "chain")
            except ChainExportError as exc:
                raise AuditInputError(str(exc)) from None
            if res.error is not None:
                self.chain_ends = self._round_of_block(res.error.block_number)
                yield (
                    self.chain_ends,
                    None,
                    "chain-block",
                    res.error.expected,
                    f"{res.error.found} (block {res.error.block_number}: {res.error.message})",
                )
            self.chain = res.chain
        else:
            from ledger.chain import Chain

            url = self.ledger_url or self.manifest.get("url")
            try:
                self.chain = Chain.rpc(url, [DEV_KEY], chain_id=self.chain_id)
            except (ConnectionError, ValueError) as exc:
                raise AuditInputError(str(exc)) from None
            if not bytes(self.chain.w3.eth.get_code(self.contract)):
                raise AuditInputError(f"no contract at {self.contract} on {url}")

    def _round_of_block(self, number: int) -> int | None:
        for e in sorted(self.entries, key=lambda x: x["round"]):
            if int(e["block"]) >= number:
                return int(e["round"])
        return None

    def read_contract(self) -> Iterator[Finding]:
        """Deployed code and setup against the compiled source and the manifest; then read the
        ``Committed`` events."""
        from ledger.compile import compile_flchain, runtime_code_sha256

        c = compile_flchain()
        code = bytes(self.chain.w3.eth.get_code(self.contract))
        if not code:
            yield None, None, "contract-code", c.runtime_sha256, f"no code at {self.contract}"
            return
        found = runtime_code_sha256(code)
        for want, what in (
            (c.runtime_sha256, "compiled source"),
            (self.manifest["compiler"]["runtime_sha256"], "manifest"),
        ):
            if found != want:
                yield None, None, "contract-code", f"{want} ({what})", found
        k = self.chain.w3.eth.contract(address=self.contract, abi=c.abi)
        view = self.chain.view
        committee = self.manifest.get("committee") or []
        try:
            want = {
                "aggregator": self.manifest["aggregator"],
                "channel_id": self.channel,
                "quorum": int(self.manifest.get("quorum", 0)),
                "committee_size": len(committee),
                "verify_signatures": bool(self.manifest.get("onchain_bls")),
            }
            got = {
                "aggregator": view(k, "aggregator"),
                "channel_id": hx(view(k, "channel_id")),
                "quorum": view(k, "quorum"),
                "committee_size": view(k, "committee_size"),
                "verify_signatures": view(k, "verify_signatures"),
            }
            for i, m in enumerate(committee):
                want[f"committee_key({i})"] = hx(g1_eip2537(bytes.fromhex(m["pubkey"])))
                got[f"committee_key({i})"] = hx(view(k, "committee_key", i))
        except Exception as exc:  # noqa: BLE001 - other code at the address: say what failed
            yield None, None, "contract-setup", "the FLChain v2 interface", repr(exc)[:120]
            return
        for key in want:
            if want[key] != got[key]:
                yield None, None, "contract-setup", f"{key}={want[key]}", f"{key}={got[key]}"
        if self.manifest["backend"] != "embedded" and want["channel_id"] != got["channel_id"]:
            self.notes.append(  # the findings that follow read as tampering: say what is likelier
                f"the contract at {self.contract} is another channel's: if the node was "
                "restarted since the run (a devnet forgets its chain), it no longer holds this "
                "run's chain, and the findings say only that"
            )
        self._gas_used = []
        for a, gas in event_logs(self.chain, k.events.Committed(), self.contract):
            sig = bytes(a["signature"])
            self.events[int(a["round"])] = Commitment(
                int(a["round"]),
                hx(a["pack_id"]),
                hx(a["global_hash"]),
                hx(a["submissions_root"]),
                hx(a["verdicts_hash"]),
                hx(a["admitted_root"]),
                int(a["signers"]),
                g2_compress_eip2537(sig).hex() if sig else None,
            )
            if gas is not None:
                self._gas_used.append(gas)

    def _commitment_of(self, e: dict[str, Any]) -> Commitment:
        return Commitment(
            int(e["round"]),
            e["pack"],
            e["global_hash"],
            e["submissions_root"],
            e["verdicts_hash"],
            e["admitted_root"],
            int(e["signers"]),
            e["signature"],
        )

    def _compare(self, e: dict[str, Any]) -> Iterator[Finding]:
        """The index entry against the chain's event for the same round."""
        rnd = int(e["round"])
        ev = self.events.get(rnd)
        if ev is None:
            if self.chain_ends is None or rnd < self.chain_ends:
                yield rnd, None, "round-on-chain", "a Committed event", "missing"
            return
        claimed = self._commitment_of(e)
        for key in (
            "pack",
            "global_hash",
            "submissions_root",
            "verdicts_hash",
            "admitted_root",
            "signers",
            "signature",
        ):
            if getattr(claimed, key) != getattr(ev, key):
                yield (
                    rnd,
                    None,
                    "commitment",
                    f"{key}={getattr(ev, key)}",
                    f"{key}={getattr(claimed, key)}",
                )

    # -- the whole run ---------------------------------------------------------------------
    def run(
        self, replay: bool = True, bls: bool = True, progress: bool = False, jobs: int = 1
    ) -> Iterator[Finding]:
        yield from self.open_chain()
        if self.chain is None:
            return
        yield from self.read_contract()
        committee = self.manifest.get("committee") or []
        if bls and committee:
            for i in verify_registration(committee):
                yield None, None, "committee-pop", "valid proof of possession", f"validator {i}"
        order = [int(e["round"]) for e in self.entries]
        for i, r in enumerate(order):
            if r != i:
                yield i, None, "round-order", f"round {i} on line {i + 1}", f"round {r}"
                break
        indexed = set(order)
        for r in sorted(set(self.events) - indexed):
            yield r, None, "round-off-chain", "an entry in rounds.jsonl", "missing"
        # every round the chain or the index knows, in order; the chain's word first
        by_round = {int(e["round"]): e for e in self.entries}
        coms = []
        for r in sorted(set(by_round) | set(self.events)):
            if r in by_round:
                yield from self._compare(by_round[r])
            coms.append(self.events.get(r) or self._commitment_of(by_round[r]))
        seed = self.manifest["account_seed"]
        facts = check_packs(
            self.dir, coms, (self.channel, self.contract, self.chain_id, seed), jobs, progress
        )
        from ledger.audit_replay import RoundReplay

        rep = RoundReplay(self, replay)
        trusted = {c.round: True for c in coms}
        if bls and committee:  # first: a round without a valid quorum signature proves nothing
            where = (self.chain_id, self.contract, self.channel)
            quorum = int(self.manifest.get("quorum") or 0) or None
            for finding in committee_findings(committee, quorum, coms, where):
                trusted[finding[0]] = False
                yield finding
        for com, fact in zip(coms, facts, strict=True):
            yield from fact.findings
            yield from rep.round(com, fact, trusted[com.round])
            self.rounds_checked += 1
            self.submissions += fact.submissions
        rep.close()
        self.gas_per_round = self._gas()

    def _gas(self) -> float | None:
        """Mean gas of the rounds' commitments (from their receipts)."""
        gas = getattr(self, "_gas_used", [])
        return sum(gas) / len(gas) if gas else None


def unfinished(run_dir: Path, rounds: int) -> list[str]:
    """A note when the run stopped before its end (no ``summary.json``, which a run writes
    last): the audit covers the rounds it recorded, and ``--resume`` records the rest where the
    run saved a checkpoint."""
    if (run_dir / "summary.json").exists():
        return []
    try:
        import yaml

        planned = int(yaml.safe_load((run_dir / "config.yaml").read_text())["experiment"]["rounds"])
    except (OSError, ValueError, TypeError, KeyError, yaml.YAMLError):
        planned = None
    of = f" of the {planned} planned" if planned is not None else ""
    rest = (
        f"python -m simulator --resume {run_dir} records the rest"
        if (run_dir / "checkpoint.pt").is_file()
        else "it saved no checkpoint to resume from"
    )
    return [
        f"the run did not finish (no summary.json): {rounds} rounds recorded{of}, all of them "
        f"audited; {rest}"
    ]
