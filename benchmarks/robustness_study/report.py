"""The table and plots of ``benchmarks/robustness.py``: one cell per defense and malicious
fraction (mean±std of the final accuracy over seeds, detection precision/recall, benign
false-rejection), accuracy against round and against the fraction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.robustness_study import grid


def _cells(results: list[dict[str, Any]]) -> dict[tuple[str, float], list[dict[str, Any]]]:
    out: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for r in results:
        out.setdefault((r["defense"], r["malicious_fraction"]), []).append(r)
    return out


def _mean(vals: list[Any]) -> float | None:
    v = [x for x in vals if x is not None]
    return float(np.mean(v)) if v else None


def cell_text(rs: list[dict[str, Any]]) -> str:
    ok = [r for r in rs if r["error"] is None and r["final_accuracy"] is not None]
    if not ok:
        # the grid judged the rule's precondition before the run (on the parameters the run
        # would use): a run that failed anyway, on a "needs ..." of its own too, is an error
        err = rs[0]["error"] if rs else ""
        return "n/a (precond)" if err.startswith("n/a") else "error"
    acc = [r["final_accuracy"] for r in ok]
    txt = f"{np.mean(acc):.3f}±{np.std(acc):.3f}"
    if all(r["malicious_fraction"] == 0 for r in ok):  # clean: benign false rejection only
        fr = _mean([r["benign_false_rejection"] for r in ok])
        return txt + (f" FR{fr:.2f}" if fr else "")
    p = _mean([r["detection_precision"] for r in ok])
    rc = _mean([r["detection_recall"] for r in ok])
    if p is not None or rc is not None:
        txt += (
            " P" + ("-" if p is None else f"{p:.2f}") + "/R" + ("-" if rc is None else f"{rc:.2f}")
        )
    fr = _mean([r.get("benign_false_rejection") for r in ok])
    if fr:
        txt += f" FR{fr:.2f}"
    asr = _mean([r.get("attack_success_rate") for r in ok])
    if asr is not None:
        txt += f" ASR{asr:.2f}"
    skipped = _mean([r.get("precondition_rounds") for r in ok])
    if skipped:  # rounds whose draw broke the rule's precondition (skipped, verdicts say so)
        txt += f" skip{skipped:.2g}"
    if len(ok) < len(rs):
        txt += f" ({len(rs) - len(ok)} err)"
    return txt


def table(results: list[dict[str, Any]], defenses: list[str], fractions: list[float]) -> str:
    cells = _cells(results)
    width = max([len(cell_text(v)) for v in cells.values()] + [10])
    head = f"{'defense':<12}" + "".join(f" {'f=' + format(f, 'g'):>{width}}" for f in fractions)
    lines = [head, "-" * len(head)]
    for d in defenses:
        lines.append(
            f"{d:<12}" + "".join(f" {cell_text(cells.get((d, f), [])):>{width}}" for f in fractions)
        )
    return "\n".join(lines)


def plots(
    results: list[dict[str, Any]], defenses: list[str], fractions: list[float], out: Path
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = _cells(results)
    top = max(fractions)
    # 12+ defenses: 20 distinct colours, and a line style per group of 10 so none look alike
    cmap = plt.get_cmap("tab20")
    style = {
        d: dict(color=cmap(i % 20), linestyle=("-", "--", ":")[(i // 10) % 3])
        for i, d in enumerate(defenses)
    }
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for d in defenses:
        dirs = [r["run_dir"] for r in cells.get((d, top), []) if r["error"] is None]
        xs, ys = grid.mean_curve(dirs)
        if xs:
            ax.plot(xs, ys, label=d, **style[d])
    ax.set(
        xlabel="round",
        ylabel="test accuracy",
        ylim=(0, 1),
        title=f"accuracy vs round, malicious fraction {top:g} (mean over seeds)",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "accuracy_vs_round.png", dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for d in defenses:
        pts = [
            (f, _mean([r["final_accuracy"] for r in cells.get((d, f), []) if r["error"] is None]))
            for f in fractions
        ]
        pts = [(f, a) for f, a in pts if a is not None]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", label=d, **style[d])
    ax.set(
        xlabel="malicious fraction",
        ylabel="final test accuracy (mean over seeds)",
        ylim=(0, 1),
        title="accuracy vs malicious fraction",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "accuracy_vs_fraction.png", dpi=110)
    plt.close(fig)
