"""``python -m simulator``: flags generated from the config dataclasses."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path
from typing import Any, get_type_hints

from actors.ray_setup import let_ray_go, ray_is_up
from simulator.config.fields import ConfigError, type_name
from simulator.config.inert import check_inert
from simulator.config.plugins import NAMED
from simulator.config.sections import SECTIONS, Config, field_index, load_config
from simulator.run.stop import sigterm_raises, stopped


def parse_kv(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` as ``(KEY, VALUE read as YAML)``: ``rate=1e-1`` gives 0.1, ``f=2`` 2."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    k, v = text.split("=", 1)
    from simulator.config.sections import yaml_value

    return k, yaml_value(v)


class OneLineParser(argparse.ArgumentParser):
    """Argument errors print one line (no usage block) and exit with code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"error: {message}\n")


def _resume_hint(cfg: Config, then: str = "; ") -> str:
    """How to go on with the run of ``cfg``, after ``then``: the resume command when it saved a
    checkpoint; else (after "; ") where its events are and that it cannot be resumed."""
    out = cfg.output.out
    if (Path(out) / "checkpoint.pt").is_file():
        return f"{then}resume with: python -m simulator --resume {out}"
    why = (
        "it stopped before its first checkpoint: run it again"
        if cfg.output.checkpoint_every
        else "it saved no checkpoint to resume from: --checkpoint-every N makes a run resumable"
    )
    return f"; events so far are in {out} ({why})"


def _stopped_line(e: KeyboardInterrupt, cfg: Config | None) -> str:
    """The one line an interrupted (Ctrl-C) or terminated (SIGTERM) run ends with."""
    what = stopped(e)[0]
    return what if cfg is None else what + _resume_hint(cfg)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m simulator",
        description="Run one FedSentry federated simulation. Values come from the defaults, "
        "then --config FILE (YAML, one mapping per section), then these flags.",
    )
    p.add_argument("--config", metavar="FILE", help="YAML config file")
    p.add_argument(
        "--print-config", action="store_true", help="print the resolved config as YAML and exit"
    )
    p.add_argument(
        "--config-markdown",
        action="store_true",
        help="print the config reference as a Markdown table (as in README) and exit",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    index = field_index()
    groups = {s: p.add_argument_group(f"{s} options") for s in SECTIONS}
    for name, (sec, f) in index.items():
        flag = "--" + name.replace("_", "-")
        help_ = f.metadata.get("help", "")
        if name in NAMED:
            help_ += f"; one of: {', '.join(NAMED[name].names())}"
        choices = f.metadata.get("choices")
        word = f.metadata.get("metavar") or _metavar(name)
        t = type_name(get_type_hints(SECTIONS[sec])[name])
        default = f.default if f.default is not f.default_factory else None  # type: ignore
        if t.startswith("dict"):
            groups[sec].add_argument(
                flag,
                dest=name,
                type=parse_kv,
                action="append",
                metavar="KEY=VALUE",
                help=help_,
                default=None,
            )
        elif t.startswith("tuple"):
            groups[sec].add_argument(
                flag,
                dest=name,
                nargs="+",
                metavar=word[:-1] if word.endswith("S") else word,
                help=f"{help_} (default: none)",
                default=None,
            )
        elif t.startswith("bool"):
            groups[sec].add_argument(
                flag,
                dest=name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=f"{help_} (default: {default})",
            )
        else:
            groups[sec].add_argument(
                flag,
                dest=name,
                default=None,
                choices=choices,
                metavar=None if choices else word,
                help=f"{help_} (default: {default})",
            )
    return p


def _metavar(name: str) -> str:
    """The word a flag's value is shown as: what the field counts (``clients_per_round`` ->
    CLIENTS), N for a period (``eval_every``), else its last word (``lr`` -> LR)."""
    if "_per_" in name:
        return name.split("_per_")[0].split("_")[-1].upper()
    if name.endswith("_every"):
        return "N"
    return name.split("_")[-1].upper()


def out_of_memory(e: BaseException) -> bool:
    """Whether ``e`` is an allocation that failed: Python's MemoryError, or torch's
    allocator (``DefaultCPUAllocator: can't allocate memory``, CUDA ``out of memory``)."""
    text = str(e)
    return isinstance(e, MemoryError) or "can't allocate memory" in text or "out of memory" in text


def _first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[-1][:200] if lines else type(e).__name__


def config_markdown() -> str:
    """The config reference: one row per field (section, YAML key, flag, default, meaning)."""
    lines = ["| section | key / flag | default | meaning |", "|---|---|---|---|"]
    for name, (sec, f) in field_index().items():
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        ch = f.metadata.get("choices") or (NAMED[name].names() if name in NAMED else None)
        meaning = f.metadata.get("help", "").replace("%%", "%")
        if ch:
            meaning += f" ({', '.join(ch)})"
        lines.append(
            f"| {sec} | `{name}` / `--{name.replace('_', '-')}` | `{default}` | {meaning} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if args.config_markdown:
        print(config_markdown(), end="")
        return 0
    flat = {
        k: v
        for k, v in vars(args).items()
        if k not in ("config", "print_config", "verbose", "config_markdown") and v is not None
    }
    index = field_index()
    for k in flat:  # KEY=VALUE maps (defense, attack, algorithm and policy parameters)
        if type_name(get_type_hints(SECTIONS[index[k][0]])[k]).startswith("dict"):
            flat[k] = dict(flat[k])
    from actors.startup import ClusterLost
    from ledger.errors import LedgerChainLost, LedgerError, LedgerRoundError
    from simulator.data import DataError
    from simulator.population.traces import TraceError
    from simulator.run.appendlog import is_disk_full
    from simulator.run.experiment import SHOWN, resume_config, run_experiment

    ray_was_up = ray_is_up()
    try:
        if flat.get("resume"):
            others = sorted(k for k in flat if k not in ("resume", *SHOWN))
            if others or args.config:
                extra = "--config" if args.config else "--" + others[0].replace("_", "-")
                raise ConfigError(
                    f"output.resume: {extra} cannot be combined with --resume "
                    "(a resumed run keeps its saved config)"
                )
            cfg = resume_config(flat["resume"])
            shown = {k: flat[k] for k in SHOWN if k in flat}  # were accepted and ignored
            cfg = cfg.replace(**shown) if shown else cfg  # until stop 50
        else:
            cfg = load_config(args.config, flat)
            check_inert(flat, cfg)
            if flat.get("ledger") is False and cfg.ledger.ledger_url is not None:
                raise ConfigError(
                    "ledger.ledger: --no-ledger contradicts ledger_url "
                    f"({cfg.ledger.ledger_url}), which records on that node; drop one"
                )
            if cfg.output.resume is not None:  # only a config file can have set it here
                raise ConfigError(
                    f"output.resume: cannot be set in a config file ({args.config}); "
                    "give --resume DIR (a resumed run keeps its saved config)"
                )
        if args.print_config:
            import yaml

            print(yaml.safe_dump(cfg.to_dict(), sort_keys=False), end="")
            return 0
        with sigterm_raises():
            summary = run_experiment(cfg)
    except ClusterLost as e:
        hint = _resume_hint(cfg)
        if e.flags and hint.startswith("; resume with: "):
            hint += " " + " ".join(e.flags)
        print(f"error: {e}{hint}", file=sys.stderr)
        return 1
    except LedgerChainLost as e:
        print(
            f"error: ledger: {e}; the rounds before it are in {cfg.output.out}/ledger but not on "
            "the node, so the run cannot resume there: run it again (or restore the node's "
            "state and resume)",
            file=sys.stderr,
        )
        return 1
    except LedgerRoundError as e:
        print(
            f"error: ledger: {e}; rounds before it are recorded{_resume_hint(cfg)}",
            file=sys.stderr,
        )
        return 1
    except (ConfigError, DataError, TraceError, ValueError, ConnectionError, LedgerError) as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        let_ray_go(ray_was_up)  # its processes' last words (a killed GCS) before the line
        print(_stopped_line(e, cfg if "cfg" in locals() else None), file=sys.stderr)
        return stopped(e)[1]
    except (MemoryError, RuntimeError) as e:
        if not out_of_memory(e) or "cfg" not in locals():
            raise
        let_ray_go(ray_was_up)
        print(
            f"error: out of memory ({_first_line(e)}); the estimate made before the start "
            f"missed it: lower --clients-per-round or the model's size{_resume_hint(cfg)}",
            file=sys.stderr,
        )
        return 1
    except OSError as e:
        if not is_disk_full(e) or "cfg" not in locals():  # no cfg: its loading failed
            raise
        print(
            f"error: no space left on the disk of {e.filename or cfg.output.out}; the rounds "
            f"before it are saved: free some space{_resume_hint(cfg, ', then ')}",
            file=sys.stderr,
        )
        return 1
    acc = summary["final_accuracy"]
    print(
        json.dumps(
            {
                k: summary[k]
                for k in (
                    "rounds",
                    "final_accuracy",
                    "best_accuracy",
                    "virtual_time",
                    "wall_time",
                    "out",
                )
            }
        )
    )
    print(f"final test accuracy: {acc:.4f}" if acc is not None else "final test accuracy: n/a")
    return 0
