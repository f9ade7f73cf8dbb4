"""``python -m ledger.audit RUN_DIR``: prove a finished run's global models from its ledger.

FLChain (Majeed & Hong, 2019) puts every local update and every global model of a channel on a
ledger so that nobody has to trust the aggregator. This audit re-validates the chain (re-imports
the embedded devnet's export, or reads the node), checks the deployed code equals the compiled
source, then for every round: every sender registered, one submission each, each blob present and
unchanged, each signed update record valid and equal to its on-chain submission, base models equal
to earlier globals, the accepted set's Merkle root, the verdict document and the global model blob
against their on-chain hashes, the global model recomputed from the accepted updates with the
recorded defense and config (:mod:`ledger.replay`), and the committee's BLS attestation.

Exit status: 0 clean, 1 findings (each with round, client, check, expected, found), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ledger.audit_checks import AuditInputError, RunAudit


@dataclass(frozen=True)
class Finding:
    """One failed check: where (round, client), what, and expected vs found."""

    round: int | None
    client: int | None
    check: str
    expected: str
    found: str

    def line(self) -> str:
        r = "-" if self.round is None else str(self.round)
        c = "-" if self.client is None else str(self.client)
        return f"round {r:>4}  client {c:>5}  {self.check:<22} expected {self.expected}  " \
               f"found {self.found}"


@dataclass
class AuditReport:
    """The result of auditing one run directory."""

    run_dir: str
    rounds: int = 0
    submissions: int = 0
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    gas_per_round: float | None = None

    @property
    def clean(self) -> bool:
        return not self.findings

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["clean"] = self.clean
        d["rounds_per_second"] = self.rounds / self.seconds if self.seconds > 0 else None
        return d

    def text(self) -> str:
        rate = f"{self.rounds / self.seconds:.2f} rounds/s" if self.seconds > 0 else ""
        head = (f"{self.run_dir}: {self.rounds} rounds, {self.submissions} submissions, "
                f"{'CLEAN' if self.clean else f'{len(self.findings)} FINDINGS'} "
                f"({self.seconds:.1f} s, {rate})")
        return "\n".join([head] + ["  " + f.line() for f in self.findings]
                         + ["  note: " + n for n in self.notes])


def audit_run(run_dir: str | Path, ledger_url: str | None = None, replay: bool = True,
              bls: bool = True, progress: bool = False) -> AuditReport:
    """Audit one run directory (raises :class:`AuditInputError` on bad input)."""
    t0 = time.perf_counter()
    a = RunAudit(Path(run_dir), ledger_url=ledger_url)
    rep = AuditReport(str(run_dir))
    for rnd, client, check, expected, found in a.run(replay=replay, bls=bls, progress=progress):
        rep.findings.append(Finding(rnd, client, check, str(expected), str(found)))
    # run-wide findings first, then by round (signatures are checked in batches, after the rest)
    rep.findings.sort(key=lambda f: (-1 if f.round is None else f.round))
    rep.rounds, rep.submissions, rep.notes = a.rounds_checked, a.submissions, a.notes
    rep.gas_per_round = a.gas_per_round
    rep.seconds = time.perf_counter() - t0
    return rep


def find_runs(paths: list[str]) -> list[Path]:
    """Run directories under ``paths`` (a run dir itself, or any directory holding runs)."""
    runs: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise AuditInputError(f"{p}: no such directory")
        if (p / "ledger" / "manifest.json").is_file():
            runs.append(p)
        else:
            runs += sorted(m.parent.parent for m in p.rglob("ledger/manifest.json"))
    if not runs:
        raise AuditInputError(f"{', '.join(paths)}: no recorded run found (no ledger/manifest.json"
                              "; was the run made with --ledger?)")
    return runs


def build_parser() -> argparse.ArgumentParser:
    from simulator.cli import OneLineParser

    p = OneLineParser(prog="python -m ledger.audit",
                      description="Audit FedSentry runs recorded on FLChain: re-validate the "
                                  "chain and re-derive every global model from the signed, "
                                  "accepted updates. Exit 0 clean, 1 findings, 2 bad input.")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                   help="a run directory (holding ledger/manifest.json) or a directory of runs "
                        "(e.g. a robustness benchmark's --out), searched recursively")
    p.add_argument("--json", metavar="FILE", default=None,
                   help="also write the full report as JSON ('-' for stdout)")
    p.add_argument("--ledger-url", default=None,
                   help="read the chain from this JSON-RPC node instead of the URL in the "
                        "manifest (runs recorded with --ledger-url)")
    p.add_argument("--no-replay", action="store_true",
                   help="skip re-deriving global models (hash, signature and chain checks only)")
    p.add_argument("--no-bls", action="store_true",
                   help="skip the committee's BLS checks (~0.3 s a round in pure-Python py-ecc)")
    p.add_argument("--workers", type=int, default=1,
                   help="audit this many runs at once, one process each (default 1)")
    p.add_argument("-q", "--quiet", action="store_true", help="print one line per run only")
    return p


def _audit_one(d: Path, kw: dict[str, Any]) -> AuditReport:
    import torch

    torch.set_num_threads(1)
    return audit_run(d, **kw)


def _reports(runs: list[Path], workers: int, kw: dict[str, Any]) -> Iterator[AuditReport]:
    if workers <= 1 or len(runs) == 1:
        for d in runs:
            yield audit_run(d, **kw, progress=len(runs) == 1)
        return
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        yield from pool.map(_audit_one, runs, [kw] * len(runs))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be >= 1")
    kw = {"ledger_url": args.ledger_url, "replay": not args.no_replay, "bls": not args.no_bls}
    try:
        runs = find_runs(args.run_dirs)
        reports = []
        for rep in _reports(runs, args.workers, kw):
            reports.append(rep)
            print(rep.text().splitlines()[0] if args.quiet else rep.text(), flush=True)
    except AuditInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if len(reports) > 1:
        bad = sum(not r.clean for r in reports)
        rounds = sum(r.rounds for r in reports)
        secs = sum(r.seconds for r in reports)
        print(f"{len(reports)} runs, {rounds} rounds, {bad} with findings "
              f"({rounds / secs if secs else 0:.2f} rounds/s)")
    if args.json:
        text = json.dumps([r.to_dict() for r in reports], indent=1)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text)
    return 0 if all(r.clean for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
