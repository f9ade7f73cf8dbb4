"""``python -m ledger.audit RUN_DIR``: prove a finished run's global models from its ledger.

FLChain (Majeed & Hong, 2019) puts every local update and every global model of a channel on a
ledger so that nobody has to trust the aggregator. This audit (ledger v2) re-validates the chain
(re-imports the embedded devnet's export with full block validation, or reads the node), checks
the deployed contract's code and setup, the committee's proofs of possession and the index of
committed rounds against the chain; then, for every round, the pack the commitment names (its
index against the pack id, every entry against its hash), each client's signed record (fields,
signature against the key it was admitted with, base model), both Merkle roots, the verdict
document, the global model re-derived from the updates with the recorded defense and config
(:mod:`ledger.replay`), and the committee's BLS signature over the commitment
(:mod:`ledger.audit_checks`, :mod:`ledger.audit_round`, :mod:`ledger.audit_replay`).

Exit status: 0 clean, 1 findings (each with round, client, check, expected, found), 2 bad input
(of several runs, the worst: a run that cannot be audited is reported in its error line and the
others are audited).
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

from ledger.audit_channel import unfinished
from ledger.audit_checks import RunAudit
from ledger.audit_find import find_runs
from ledger.audit_input import AuditInputError

__all__ = ["AuditReport", "Finding", "audit_run", "main"]


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
        return (
            f"round {r:>4}  client {c:>5}  {self.check:<22} expected {self.expected}  "
            f"found {self.found}"
        )


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
        head = (
            f"{self.run_dir}: {self.rounds} rounds, {self.submissions} submissions, "
            f"{'CLEAN' if self.clean else f'{len(self.findings)} FINDINGS'} "
            f"({self.seconds:.1f} s, {rate})"
        )
        return "\n".join(
            [head] + ["  " + f.line() for f in self.findings] + ["  note: " + n for n in self.notes]
        )


def audit_run(
    run_dir: str | Path,
    ledger_url: str | None = None,
    replay: bool = True,
    bls: bool = True,
    progress: bool = False,
    jobs: int = 1,
) -> AuditReport:
    """Audit one run directory (raises :class:`AuditInputError` on bad input, and for a run
    still being recorded); ``jobs`` processes check its rounds' packs.

    The replay runs on one torch thread (the caller's count is restored after): its tensors are
    one round's rows, and on a busy machine two threads made the robustness run's audit 5x
    slower (1.9 s against 0.38 s, each thread waiting for the other at every operation), while
    on an idle one both counts take the same time."""
    import torch

    from ledger.errors import ledger_dir
    from ledger.session_start import being_recorded

    if being_recorded(ledger_dir(run_dir)):  # its files are mid-write: findings would be false
        raise AuditInputError(
            f"{run_dir}: the run is still being recorded (its recorder holds ledger/.lock): "
            "audit it once the run has ended"
        )
    t0 = time.perf_counter()
    a = RunAudit(Path(run_dir), ledger_url=ledger_url)
    rep = AuditReport(str(run_dir))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for rnd, client, check, expected, found in a.run(
            replay=replay, bls=bls, progress=progress, jobs=jobs
        ):
            rep.findings.append(Finding(rnd, client, check, str(expected), str(found)))
    finally:
        torch.set_num_threads(threads)
    # run-wide findings first, then by round (signatures are checked in batches, after the rest)
    rep.findings.sort(key=lambda f: -1 if f.round is None else f.round)
    rep.rounds, rep.submissions, rep.notes = a.rounds_checked, a.submissions, a.notes
    rep.notes += unfinished(Path(run_dir), rep.rounds, a.cfg.experiment.rounds)
    rep.gas_per_round = a.gas_per_round
    rep.seconds = time.perf_counter() - t0
    return rep


def build_parser() -> argparse.ArgumentParser:
    from simulator.cli import OneLineParser

    p = OneLineParser(
        prog="python -m ledger.audit",
        description="Audit FedSentry runs recorded on FLChain: re-validate the "
        "chain and re-derive every global model from the signed, "
        "accepted updates. Exit 0 clean, 1 findings, 2 bad input.",
    )
    p.add_argument(
        "run_dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="a run directory (holding ledger/manifest.json) or a directory of runs "
        "(e.g. a robustness benchmark's --out), searched recursively; hidden directories "
        "in it (names starting with '.') are skipped. A run that cannot be audited (exit 2) "
        "gets its error line and the others are audited",
    )
    p.add_argument(
        "--json",
        metavar="FILE",
        default=None,
        help="also write the full report as JSON ('-' for stdout)",
    )
    p.add_argument(
        "--ledger-url",
        default=None,
        help="read the chain from this JSON-RPC node instead of the URL in the "
        "manifest (runs recorded with --ledger-url; refused for a run recorded on the "
        "embedded devnet, whose chain is its ledger/chain)",
    )
    p.add_argument(
        "--no-replay",
        action="store_true",
        help="skip re-deriving global models (hash, signature and chain checks only)",
    )
    p.add_argument(
        "--no-bls",
        action="store_true",
        help="skip the committee's BLS checks (about 0.5 ms a round with blspy)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="processes to use (default 1): several runs are audited one per "
        "process; a single run's round packs are checked on all of them",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print one line per run only")
    return p


def _audit_or_error(run_dir: Path, **kw: Any) -> AuditReport | str:
    """:func:`audit_run`, or the one-line reason the run cannot be audited (bad input)."""
    try:
        return audit_run(run_dir, **kw)
    except (AuditInputError, ValueError) as exc:  # ConfigError is a ValueError
        return str(exc).splitlines()[0]
    except Exception as exc:  # noqa: BLE001 - one run's input the checks missed: not the others
        return f"{run_dir}: cannot be audited: {type(exc).__name__}: {exc}".splitlines()[0]


def _reports(
    runs: list[Path], jobs: int, kw: dict[str, Any], progress: bool = True
) -> Iterator[AuditReport | str]:
    """Reports of ``runs`` in order, a run that cannot be audited as its one-line error (the
    others are audited all the same): one process per run with ``jobs`` > 1 and several runs,
    else in turn (a single run spreads its packs over ``jobs`` processes)."""
    if jobs <= 1 or len(runs) == 1:
        for d in runs:
            yield _audit_or_error(d, **kw, progress=progress and len(runs) == 1, jobs=jobs)
        return
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    from tqdm import tqdm

    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(_audit_or_error, d, **kw) for d in runs]
        for f in tqdm(futures, desc="audit", unit="run", disable=not progress, leave=False):
            yield f.result()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    kw = {"ledger_url": args.ledger_url, "replay": not args.no_replay, "bls": not args.no_bls}
    try:
        if args.json and args.json != "-":  # checked before the audit, not after it
            from simulator.run.runlock import writable_file

            writable_file(Path(args.json), "--json")
        runs = find_runs(args.run_dirs)
    except (AuditInputError, ValueError) as exc:  # ConfigError is a ValueError
        print(f"error: {exc}", file=sys.stderr)
        return 2
    reports, failed, docs = [], [], []
    for run, rep in zip(runs, _reports(runs, args.jobs, kw, not args.quiet), strict=True):
        if isinstance(rep, str):  # this run only: the others are audited all the same
            failed.append(rep)
            docs.append({"run_dir": str(run), "error": rep})
            print(f"error: {rep}", file=sys.stderr, flush=True)
            continue
        reports.append(rep)
        docs.append(rep.to_dict())
        print(rep.text().splitlines()[0] if args.quiet else rep.text(), flush=True)
    if len(runs) > 1:
        bad = sum(not r.clean for r in reports)
        rounds = sum(r.rounds for r in reports)
        secs = sum(r.seconds for r in reports)
        print(
            f"{len(runs)} runs, {rounds} rounds, {bad} with findings"
            + (f", {len(failed)} not audited (bad input)" if failed else "")
            + f" ({rounds / secs if secs else 0:.2f} rounds/s)"
        )
    if args.json:
        text = json.dumps(docs, indent=1)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text)
    return 2 if failed else 0 if all(r.clean for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
