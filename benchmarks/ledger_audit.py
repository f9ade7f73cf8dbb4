"""Ledger audit study: record runs on FLChain, measure the ledger's cost, audit them, tamper.

With RUN_DIRs, audits those runs (any directory holding recorded runs, e.g. a robustness
benchmark's ``--out`` made with ``--ledger``). Without, records ``--runs`` seeds of the
robustness benchmark's default task (Siren's setting: 10 IID clients, all selected every round,
digits MLP) twice, without and with the ledger, to measure the ledger's overhead, then audits
each recorded run (full, and without the BLS checks) and, with ``--tamper``, audits a tampered
copy per tamper case (:mod:`ledger.tamper`) to show each is caught at its round and client.

Writes ``results.json`` into ``--out`` and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simulator.cli import OneLineParser, parse_kv  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(prog="python benchmarks/ledger_audit.py", description=__doc__.split("\n")[0])
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR",
                   help="recorded runs to audit (default: record fresh ones)")
    p.add_argument("--runs", type=int, default=3, help="seeds to record (default 3)")
    p.add_argument("--rounds", type=int, default=30, help="rounds per recorded run (default 30)")
    p.add_argument("--defense", default="median", help="defense of the recorded runs")
    p.add_argument("--attack", default="labelflip", help="attack of the recorded runs")
    p.add_argument("--fraction", type=float, default=0.2, help="malicious fraction (default 0.2)")
    p.add_argument("--committee", type=int, default=4,
                   help="BLS edge validators attesting each round (default 4; 0 = none)")
    p.add_argument("--ledger-url", default=None, help="record on this JSON-RPC node instead")
    p.add_argument("--set", type=parse_kv, action="append", default=[], metavar="KEY=VALUE",
                   dest="overrides", help="extra flat config override (repeatable)")
    p.add_argument("--tamper", action="store_true",
                   help="also audit a tampered copy of each run per tamper case")
    p.add_argument("--out", type=Path, default=Path("runs/ledger-audit"),
                   help="output directory (default runs/ledger-audit)")
    args = p.parse_args(argv)
    if args.runs < 1 or args.rounds < 1 or args.committee < 0:
        p.error("--runs and --rounds must be >= 1, --committee >= 0")
    return args


def record(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run each seed without and with the ledger; returns per-run timings."""
    from tqdm import tqdm

    import benchmarks.robustness_grid as grid
    from simulator.config import build_config
    from simulator.run import run_experiment

    base = grid.resolve_scenario(grid.DEFAULT_SCENARIO, "digits", args.rounds,
                                 dict(args.overrides))
    out = []
    for s in tqdm(range(args.runs), desc="record", unit="seed", file=sys.stderr):
        flat = {**base, "seed": s, "defense": args.defense, "attack": args.attack,
                "attack_fraction": args.fraction, "backend": "local", "progress": False,
                "plots": False, "committee": args.committee}
        if args.defense in grid.F_DEFENSES:
            flat["defense_params"] = {"f": grid.byzantine_f(args.fraction,
                                                            base["clients_per_round"])}
        plain = run_experiment(build_config(flat={**flat, "out": str(args.out / f"plain-s{s}")}))
        rec = run_experiment(build_config(flat={**flat, "out": str(args.out / f"ledger-s{s}"),
                                                "ledger": True, "ledger_url": args.ledger_url}))
        out.append({"seed": s, "run_dir": rec["out"], "plain_seconds": plain["run_seconds"],
                    "ledger_run_seconds": rec["run_seconds"],
                    "ledger_seconds": rec["ledger"]["ledger_seconds"],
                    "gas_per_round_by_function": rec["ledger"]["gas_per_round"],
                    "same_accuracy": plain["final_accuracy"] == rec["final_accuracy"]})
    return out


def audit_all(dirs: list[Path], tamper: bool, ledger_url: str | None) -> list[dict[str, Any]]:
    from ledger.audit import audit_run
    from ledger.tamper import CASES, NotApplicable, caught

    rows = []
    for d in dirs:
        full = audit_run(d, ledger_url=ledger_url)
        fast = audit_run(d, ledger_url=ledger_url, bls=False)
        row = {"run_dir": str(d), "rounds": full.rounds, "clean": full.clean,
               "findings": [f.line() for f in full.findings],
               "gas_per_round": full.gas_per_round,
               "audit_rounds_per_s": full.rounds / full.seconds,
               "audit_rounds_per_s_no_bls": fast.rounds / fast.seconds, "tamper": {}}
        if tamper:
            for name, case in CASES.items():
                copy = d.parent / f".tamper-{d.name}"
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(d, copy)
                try:
                    expected = case(copy)
                except NotApplicable as exc:
                    row["tamper"][name] = f"n/a ({exc})"
                    continue
                rep = audit_run(copy, ledger_url=ledger_url, bls=False)
                at, only = caught(rep.findings, expected)
                row["tamper"][name] = ("caught" if at and only else
                                       "caught, extra findings" if at else "MISSED")
                shutil.rmtree(copy, ignore_errors=True)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from ledger.audit import find_runs
    from ledger.audit_checks import AuditInputError

    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        recorded = [] if args.run_dirs else record(args)
        dirs = find_runs(args.run_dirs) if args.run_dirs else [Path(r["run_dir"])
                                                               for r in recorded]
        audits = audit_all(dirs, args.tamper, args.ledger_url)
    except (AuditInputError, ValueError) as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    (args.out / "results.json").write_text(json.dumps(
        {"recorded": recorded, "audits": audits, "seconds": time.perf_counter() - t0}, indent=1))
    if recorded:
        print("seed  plain s  ledger run s  ledger s  overhead  same acc  gas/round")
        for r in recorded:
            gas = sum(r["gas_per_round_by_function"].values())
            print(f"{r['seed']:>4}  {r['plain_seconds']:7.2f}  {r['ledger_run_seconds']:12.2f}  "
                  f"{r['ledger_seconds']:8.2f}  "
                  f"{100 * (r['ledger_run_seconds'] / r['plain_seconds'] - 1):7.0f}%  "
                  f"{str(r['same_accuracy']):>8}  {gas:9.0f}")
    print("run                                      rounds  clean  audit r/s  (no BLS)  gas/round")
    for a in audits:
        gas = f"{a['gas_per_round']:.0f}" if a["gas_per_round"] else "-"
        print(f"{a['run_dir'][-40:]:<40} {a['rounds']:>6}  {str(a['clean']):>5}  "
              f"{a['audit_rounds_per_s']:9.2f}  {a['audit_rounds_per_s_no_bls']:8.2f}  {gas:>9}")
        for name, verdict in a["tamper"].items():
            print(f"    tamper: {name:<45} {verdict}")
    print(f"wrote {args.out}/results.json")
    bad = [a for a in audits if not a["clean"]] + [
        a for a in audits for v in a["tamper"].values() if not v.startswith(("caught", "n/a"))]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
