"""The audit's checks that run round after round: admission, client signatures, base models and
the replay of the aggregation (:class:`ledger.replay.Replayer`, the engine's own aggregate and
server step, without a second simulation).

On the same platform and torch version the replayed global model is bit-identical to the
recorded one; elsewhere float reductions may differ in the last bits, so a replay within
:data:`ledger.replay.TOLERANCE` of the recorded model is a note, not a finding.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from ledger.audit_round import Commitment, PackFacts
from ledger.pack import Pack, PackError
from ledger.pack_rows import batch_of_pack
from ledger.records import hx, model_blob, sha256, unhx
from ledger.replay import TOLERANCE, Replayer, replay_error
from ledger.store import BlobError, decode

Finding = tuple[int | None, int | None, str, Any, Any]


class RoundReplay:
    """Cross-round state of an audit: admitted keys, global model hashes and models, and the
    server side being replayed.

    Parameters
    ----------
    audit : RunAudit
        The audit (its ledger directory, config, manifest and notes).
    replay : bool
        Whether to re-derive every global model.
    """

    def __init__(self, audit: Any, replay: bool) -> None:
        self.audit = audit
        self.admitted: dict[int, bytes] = {}
        m = audit.manifest
        self.hashes: dict[int, str | None] = {0: m["initial_global_hash"]}
        self.history: dict[int, torch.Tensor] = {}
        self.replayer = Replayer(audit.cfg) if replay else None
        self.first: list[Finding] = []
        self.blind = False  # an earlier round's admission list is lost
        self.alt: dict[int, tuple[str, torch.Tensor]] = {}  # disputed rounds: recomputed model
        try:
            pack = Pack.read(audit.dir, unhx(m["initial_pack"]))
            if hx(pack.digest("global")) != m["initial_global_hash"] or not pack.ok("global"):
                raise PackError("its global model is not the manifest's initial model")
            self.history[0] = torch.from_numpy(decode(bytes(pack.raw("global")))["global"])
        except (PackError, KeyError, BlobError) as exc:
            self.first.append((0, None, "pack", m.get("initial_pack"), f"initial model: {exc}"))

    def round(self, com: Commitment, fact: PackFacts, trusted: bool = True) -> Iterator[Finding]:
        """The cross-round checks and the replay of round ``com.round``.

        One bad round is reported once, in its round: a round whose admission list is lost
        leaves later admissions unknown (no "never admitted" findings after it), a round whose
        inputs are corrupt is not replayed, and a round whose committed global model the replay
        disputes leaves two candidates for the next rounds (the committed and the recomputed
        one): a later client's base model may match either, and the next replay starts from
        the one the next round's clients name. A round without a valid committee signature
        (``trusted`` False) proves nothing: its admissions and global model are not used to
        check later rounds (what depends on them is not checked, and a note says so).
        """
        r = com.round
        yield from self.first
        self.first = []
        self.blind = self.blind or not fact.admitted_known or not trusted
        for c in sorted(fact.admitted if trusted else ()):
            if c in self.admitted:
                yield r, c, "admission", "one admission per client", "admitted again"
            else:
                self.admitted[c] = fact.admitted[c]
        for c in fact.signers:
            if c not in self.admitted and not self.blind:
                yield (
                    r,
                    c,
                    "admission",
                    "a client admitted in this or an earlier round",
                    "never admitted",
                )
        named: dict[int, str] = {}
        for c, (b, h) in fact.bases.items():
            alt = self.alt.get(b)
            if b in self.hashes and self.hashes[b] is None:
                continue  # built on an unproven round
            if self.hashes.get(b) != h and (alt is None or alt[0] != h):
                yield r, c, "base-model", self.hashes.get(b), h
            named[b] = h
        for b, (h, model) in self.alt.items():  # start from the model the clients name
            if named.get(b) == h:
                self.history[b] = model
        self.hashes[r + 1] = com.global_hash
        new = None
        if self.replayer is not None and fact.readable and fact.inputs_ok:
            new = yield from self._replay(com, fact)
        elif self.replayer is not None and fact.readable:
            self.audit.notes.append(f"round {r}: not replayed (its inputs are corrupt)")
        if not trusted:
            self.hashes[r + 1] = None
            self.history.pop(r + 1, None)
            self.audit.notes.append(
                f"round {r}: unproven (no valid committee signature); "
                "what later rounds build on it is not checked"
            )
        elif fact.global_ok:
            pack = fact.pack or Pack.read(self.audit.dir, unhx(com.pack))
            self.history[r + 1] = torch.from_numpy(decode(bytes(pack.raw("global")))["global"])
        elif new is not None:
            self.history[r + 1] = new
        for old in [k for k in self.history if k < r - max(self.audit.cfg.clock.max_staleness, 64)]:
            del self.history[old]
            self.alt.pop(old, None)

    def _replay(self, com: Commitment, fact: PackFacts) -> Iterator[Finding]:
        """Yields findings; returns the recomputed global model (``None`` if impossible)."""
        r = com.round
        if r not in self.history:
            self.audit.notes.append(
                f"round {r}: not replayed (the global model it started from is unavailable)"
            )
            return None
        from defenses import UpdateBatch

        try:
            pack = fact.pack or Pack.read(self.audit.dir, unhx(com.pack))
            extras: dict[int, dict[str, Any]] = {}
            rows, fields = batch_of_pack(pack, self.replayer.row_size, extras)
        except (PackError, ValueError, KeyError) as exc:
            yield r, None, "recompute-global", com.global_hash, f"inputs unusable: {exc}"
            return None
        try:
            new, verdicts = self.replayer.step(
                r, UpdateBatch(torch.from_numpy(rows), **fields), self.history, extras
            )
        except (KeyError, ValueError, RuntimeError) as exc:
            yield r, None, "recompute-global", com.global_hash, f"replay failed: {exc}"
            return None
        got = hx(sha256(model_blob(new)))
        if got != com.global_hash and not self._close_enough(pack, new, r, fact):
            yield r, None, "recompute-global", com.global_hash, got
            self.alt[r + 1] = (got, new)  # later rounds may build on either model
        kept = sorted(v.client_id for v in verdicts if v.kept)
        if fact.accepted is not None and kept != fact.accepted:
            yield r, None, "recompute-verdicts", kept, fact.accepted
        return new

    def _close_enough(self, pack: Pack, new: torch.Tensor, r: int, fact: PackFacts) -> bool:
        if not fact.global_ok:
            return False
        err = replay_error(new, decode(bytes(pack.raw("global")))["global"])
        if err <= TOLERANCE:
            self.audit.notes.append(
                f"round {r}: recomputed global equal within {err:.1e} (not bit-identical)"
            )
            return True
        return False

    def close(self) -> None:
        if self.replayer is not None:
            self.replayer.close()
