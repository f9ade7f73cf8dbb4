"""The checks of :mod:`ledger.audit`, one run directory at a time (ledger v2).

Each failed check is yielded as ``(round, client, check, expected, found)``. Input that makes an
audit impossible (no manifest, another ledger format, a manifest or index line of the wrong
form (:mod:`ledger.audit_input`), unreadable config, node unreachable, wrong chain id, no
contract at the address, a ``--ledger-url`` for a run recorded on the embedded devnet) raises
:class:`AuditInputError` instead: that is exit status 2, not a finding.

Order: the config against the channel id (:mod:`ledger.audit_channel`), the chain
(re-imported with full block validation, or read from the node), the contract (code and
setup), the committee's proofs of possession, the index against the chain's ``Committed``
events (every field, the transaction and block too) and the rounds recorded against those
planned; then every round's pack in one pass (:func:`ledger.audit_round.check_pack`,
in parallel with ``jobs``), the cross-round checks (admission, client signatures, base models),
the replay of the aggregation (:mod:`ledger.replay`) and the committee signatures, batched
(:mod:`ledger.audit_committee`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ledger.attestation import verify_registration
from ledger.audit_channel import channel_findings, round_count_findings
from ledger.audit_committee import committee_findings
from ledger.audit_input import AuditInputError, read_index, read_manifest
from ledger.audit_round import Commitment, PackFacts, check_packs
from ledger.chain_events import event_records
from ledger.commitment import g1_eip2537, g2_compress_eip2537
from ledger.records import DEV_KEY, hx

Finding = tuple[int | None, int | None, str, Any, Any]
#: the fields of a ``Committed`` event (:class:`Commitment`'s), as an index line names them
COMMITTED = (
    "round",
    "pack",
    "global_hash",
    "submissions_root",
    "verdicts_hash",
    "admitted_root",
    "signers",
    "signature",
)


class RunAudit:
    """Audit state of one run directory; :meth:`run` yields the findings."""

    def __init__(self, run_dir: Path, ledger_url: str | None = None) -> None:
        self.run_dir, self.dir = run_dir, run_dir / "ledger"
        self.ledger_url = ledger_url
        self.manifest = read_manifest(run_dir)  # its form checked: AuditInputError
        if ledger_url is not None and self.manifest["backend"] == "embedded":
            raise AuditInputError(
                f"{run_dir} was recorded on the embedded devnet (its chain is in "
                f"{self.dir / 'chain'}); --ledger-url applies to runs recorded on a node"
            )
        if not (self.dir / "rounds.jsonl").is_file():
            raise AuditInputError(f"{run_dir}: ledger/rounds.jsonl is missing")
        self.entries = read_index(self.dir / "rounds.jsonl")
        from simulator.config.fields import ConfigError
        from simulator.config.sections import build_config

        try:
            self.cfg = build_config(self.manifest["config"])
        except ConfigError as exc:
            raise AuditInputError(
                f"{self.dir / 'manifest.json'}: its 'config' is invalid: {exc}"
            ) from None
        self.channel = self.manifest["channel_id"]
        self.contract = self.manifest["contract"]
        self.chain_id = self.manifest["chain_id"]
        self.rounds_checked = self.submissions = 0
        self.notes: list[str] = []
        self.gas_per_round: float | None = None
        self.events: dict[int, Commitment] = {}
        self.foreign_channel = False  # a node's contract at the address is another channel's
        self.landed: dict[int, tuple[str, int]] = {}  # round -> its commitment's tx and block

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
                where = "" if self.ledger_url else " (where it was recorded; --ledger-url if moved)"
                raise AuditInputError(f"{self.run_dir}: {exc}{where}") from None
            if not bytes(self.chain.w3.eth.get_code(self.contract)):
                raise AuditInputError(f"{self.run_dir}: no contract at {self.contract} on {url}")

    def _round_of_block(self, number: int) -> int | None:
        for e in sorted(self.entries, key=lambda x: x["round"]):
            if e["block"] >= number:
                return e["round"]
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
                want[f"committee_key({i})"] = _g1(m["pubkey"])
                got[f"committee_key({i})"] = hx(view(k, "committee_key", i))
        except Exception as exc:  # noqa: BLE001 - other code at the address: say what failed
            yield None, None, "contract-setup", "the FLChain v2 interface", repr(exc)[:120]
            want = got = {}  # its events are read all the same: a round on chain is no "missing"
        for key in want:
            if want[key] != got[key]:
                yield None, None, "contract-setup", f"{key}={want[key]}", f"{key}={got[key]}"
        self.foreign_channel = self.manifest["backend"] != "embedded" and want.get(
            "channel_id"
        ) != got.get("channel_id")
        if self.foreign_channel:
            self.notes.append(  # the findings that follow read as tampering: say what is likelier
                f"the contract at {self.contract} is another channel's: if the node was "
                "restarted since the run (a devnet forgets its chain), it no longer holds this "
                "run's chain, and the findings say only that"
            )
        self._gas_used = []
        for a, gas, tx, block in event_records(self.chain, k.events.Committed(), self.contract):
            sig = bytes(a["signature"])
            self.landed[int(a["round"])] = (tx, block)
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
        return Commitment(*(e[k] for k in COMMITTED))

    def _compare(self, e: dict[str, Any]) -> Iterator[Finding]:
        """The index entry against the chain's event for the same round."""
        rnd = e["round"]
        ev = self.events.get(rnd)
        if ev is None:
            if self.chain_ends is None or rnd < self.chain_ends:
                yield rnd, None, "round-on-chain", "a Committed event", "missing"
            return
        tx, block = self.landed[rnd]
        chain = {**{k: getattr(ev, k) for k in COMMITTED}, "tx": tx, "block": block}
        for key, want in chain.items():
            if e[key] != want:
                yield rnd, None, "commitment", f"{key}={want}", f"{key}={e[key]}"

    def _counts(self, e: dict[str, Any], fact: PackFacts) -> Iterator[Finding]:
        """The index entry's counts of submissions and admissions against its pack's."""
        pack = {
            "submissions": fact.submissions if fact.readable else e["submissions"],
            "admitted": len(fact.admitted) if fact.admitted_known else e["admitted"],
        }
        for key, want in pack.items():
            if e[key] != want:
                yield (
                    e["round"],
                    None,
                    "commitment",
                    f"{key}={want} (the pack's)",
                    f"{key}={e[key]}",
                )

    # -- the whole run ---------------------------------------------------------------------
    def run(
        self, replay: bool = True, bls: bool = True, progress: bool = False, jobs: int = 1
    ) -> Iterator[Finding]:
        yield from channel_findings(self.manifest, self.cfg.experiment.seed)
        yield from self.open_chain()
        if self.chain is None:
            return
        yield from self.read_contract()
        committee = self.manifest.get("committee") or []
        if bls and committee:
            for i in verify_registration(committee):
                yield None, None, "committee-pop", "valid proof of possession", f"validator {i}"
        order = [e["round"] for e in self.entries]
        for i, r in enumerate(order):
            if r != i:
                yield i, None, "round-order", f"round {i} on line {i + 1}", f"round {r}"
                break
        indexed = set(order)
        for r in sorted(set(self.events) - indexed):
            yield r, None, "round-off-chain", "an entry in rounds.jsonl", "missing"
        # every round the chain or the index knows, in order; the chain's word first
        by_round = {e["round"]: e for e in self.entries}
        coms = []
        for r in sorted(set(by_round) | set(self.events)):
            if r in by_round:
                yield from self._compare(by_round[r])
            coms.append(self.events.get(r) or self._commitment_of(by_round[r]))
        recorded = coms[-1].round + 1 if coms else 0
        yield from round_count_findings(self.run_dir, self.cfg, recorded)
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
            if com.round in by_round:
                yield from self._counts(by_round[com.round], fact)
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


def _g1(pubkey: str) -> str:
    """A committee member's key from the manifest as the contract holds it (EIP-2537 G1), or
    what is wrong with it (a manifest's key of no point is its finding, not the contract's)."""
    try:
        return hx(g1_eip2537(bytes.fromhex(pubkey)))
    except ValueError as exc:
        return f"(the manifest's key is no G1 point: {exc})"
