"""Merging the workers' answers of a round into one result, and the per-chunk timings they
report (the runtime data a placement learns from).

A worker's answer is compact (:meth:`actors.trainer.ClientTrainer.train`: per-client numbers in
one ``meta`` array); :func:`expand` names its fields, :func:`merge_results` combines answers (the
per-client fields in the round's client order, the rows in ascending client id),
:func:`chunk_timings` lists what each stacked chunk held and how long it took. An executor may
tag an answer with :data:`TAGS` (the actor's index and kind, when the driver received it) before
merging.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from actors.arena import Arena

ROWS = Arena()  # the merged rows of a round: reused once the last round's are let go
PER_CLIENT = ("client_ids", "losses", "steps", "num_samples", "finite")
TAGS = ("actor", "kind", "finished")  # what an executor adds to a worker's answer


def expand(part: dict[str, Any]) -> dict[str, Any]:
    """A worker's compact answer (per-client numbers in one ``meta`` array: id, loss, steps,
    samples, finite, returned) as named per-client fields; its ``chunks`` and the executor's
    tags (:data:`TAGS`) are kept when present."""
    m = part["meta"]
    ids = m[:, 0].astype(np.int64)
    out = {
        "client_ids": ids,
        "losses": m[:, 1].astype(np.float32),
        "steps": m[:, 2].astype(np.int64),
        "num_samples": m[:, 3].astype(np.int64),
        "finite": m[:, 4] > 0,
        "row_ids": ids[m[:, 5] > 0],
        "rows": part["rows"],
        "sum": part["sum"],
        "sum_weight": part["sum_weight"],
        "outputs": part.get("outputs", {}),
        "local": part.get("local"),
        "seconds": part["seconds"],
        "chunks": part.get("chunks"),
    }
    out.update({k: part[k] for k in TAGS if k in part})
    return out


SUM_BLOCK = 64  # rows a GPU converts to float64 at a time in :func:`weighted_sum`


def weighted_sum(
    rows: torch.Tensor, weights: torch.Tensor, blocked: bool | None = None
) -> np.ndarray:
    """``sum_k weights[k] * rows[k]`` accumulated in float64: a worker's partial sum of a
    linear rule (``[K, P]`` float32 rows, ``[K]`` weights; a weight of 0 leaves a row out).

    The product of a float32 entry and a sample count (an integer below 2^29) is exact in
    float64, and the sum keeps 29 more bits than float32. That makes a run's model the same
    whatever the number of actors: the actors' partial sums group the rows differently with
    every split. Summed in float32 (before stop 52), 1,468 of the digits MLP's 8,970 entries
    differed in their last bit after one round of 200 clients on one actor against two. In
    float64 the groupings differ by ~1e-16 of an entry, which the aggregate's rounding to
    float32 hides unless an entry lies within that distance of a float32 rounding boundary
    (none in the runs measured; ``tests/test_actor_count.py``).

    On the CPU numpy's einsum converts the rows in buffered pieces, so there is no float64
    copy of them: 5.7-7.3 ms for 1,000 rows of 8,970 on the 2-core CI machine, against
    1.4-2.1 ms for the float32 product. On a GPU (or with ``blocked`` True) the rows are
    converted :data:`SUM_BLOCK` at a time.
    """
    if blocked is None:
        blocked = rows.device.type != "cpu"
    if not blocked:
        w = weights.detach().to(torch.float64).numpy()
        return np.einsum("k,kp->p", w, rows.detach().numpy(), dtype=np.float64)
    w = weights.to(device=rows.device, dtype=torch.float64)
    acc = torch.zeros(rows.shape[1], dtype=torch.float64, device=rows.device)
    for a in range(0, len(rows), SUM_BLOCK):
        acc.add_(w[a : a + SUM_BLOCK] @ rows[a : a + SUM_BLOCK].double())
    return acc.cpu().numpy()


def merge_results(parts: list[dict[str, Any]], order: list[int]) -> dict[str, Any]:
    """Combine the workers' answers.

    Per-client fields (``client_ids``, ``losses``, ``steps``, ``num_samples``, ``finite``,
    ``outputs``, ``local``) are reordered to follow ``order``; returned rows (``row_ids``,
    ``rows``) come in ascending client id, the order a round's batch stacks them in, written
    once into a reused buffer (:data:`ROWS`) so that the batch is a slice of it, not a copy;
    partial sums are added in the order of ``parts`` (``sum``,
    ``sum_weight``: give the parts in a fixed order for bitwise-reproducible sums); ``seconds``
    is the slowest worker's training time; ``chunks`` has one entry per trained chunk (see
    :func:`chunk_timings`).
    """
    parts = [expand(p) for p in parts if len(p["meta"])]
    if not parts:
        out: dict[str, Any] = {k: np.zeros(0, np.int64) for k in PER_CLIENT}
        out.update(
            row_ids=np.zeros(0, np.int64),
            rows=None,
            sum=None,
            sum_weight=0.0,
            outputs={},
            local=None,
            seconds=0.0,
            chunks=[],
        )
        return out
    chunks = chunk_timings(parts)
    if (
        len(parts) == 1
        and parts[0]["client_ids"].tolist() == list(order)
        and _ascending(parts[0]["row_ids"])
    ):
        return {**{k: v for k, v in parts[0].items() if k not in TAGS}, "chunks": chunks}
    ids = np.concatenate([p["client_ids"] for p in parts])
    if ids.tolist() == list(order):  # the usual case: answers in request order, no reordering
        perm = slice(None)
    else:
        pos = {int(c): i for i, c in enumerate(ids)}
        perm = np.array([pos[c] for c in order], dtype=np.int64)
    out = {k: np.concatenate([p[k] for p in parts])[perm] for k in PER_CLIENT}
    out["outputs"] = {
        k: np.concatenate([p["outputs"][k] for p in parts])[perm] for k in parts[0]["outputs"]
    }
    out["local"] = (
        None if parts[0]["local"] is None else np.concatenate([p["local"] for p in parts])[perm]
    )
    out["row_ids"], out["rows"] = _rows_by_client(parts)
    sums = [p["sum"] for p in parts if p["sum"] is not None]
    out["sum"] = np.sum(sums, axis=0) if sums else None
    out["sum_weight"] = float(sum(p["sum_weight"] for p in parts))
    out["seconds"] = max(float(p["seconds"]) for p in parts)
    out["chunks"] = chunks
    return out


def _ascending(ids: np.ndarray) -> bool:
    return bool(np.all(ids[:-1] < ids[1:]))


def _rows_by_client(parts: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray | None]:
    """The parts' returned rows in ascending client id, copied once into :data:`ROWS` (each
    part's rows scattered to their places) and their ids."""
    row_ids = np.concatenate([p["row_ids"] for p in parts])
    rows = [p["rows"] for p in parts if len(p["row_ids"])]
    if not rows:
        return row_ids, None
    out = ROWS.empty((len(row_ids), *rows[0].shape[1:]), rows[0].dtype)
    if _ascending(row_ids):
        return row_ids, np.concatenate(rows, out=out)
    at = np.argsort(row_ids, kind="stable")
    place = np.empty(len(at), np.int64)
    place[at] = np.arange(len(at))  # where each concatenated row goes
    start = 0
    for r in rows:
        out[place[start : start + len(r)]] = r
        start += len(r)
    return row_ids[at], out


def chunk_timings(parts: list[dict[str, Any]]) -> list[dict[str, float | int | str]]:
    """What the workers trained as stacked chunks and how long each took (the runtime a
    placement must predict), from expanded answers (:func:`expand`).

    A part's own ``chunks`` entries (clients, longest and total local steps, samples, ``start``
    and ``end`` in seconds since its train call began) give one entry each, with ``seconds =
    end - start``; a part without them is one chunk of all its clients, ``seconds`` its training
    time. Every entry of a tagged part also carries ``actor`` (index), ``kind`` (name) and,
    from a Ray pool, ``finished`` (seconds from submitting the round to receiving the answer,
    on the driver's clock). Times are rounded to microseconds.
    """
    out: list[dict[str, float | int | str]] = []
    for p in parts:
        tag = {k: p[k] for k in TAGS if k in p}
        if "finished" in tag:
            tag["finished"] = round(float(tag["finished"]), 6)
        if not p.get("chunks"):
            out.append(
                {
                    "clients": len(p["client_ids"]),
                    "max_steps": int(p["steps"].max()),
                    "steps": int(p["steps"].sum()),
                    "samples": int(p["num_samples"].sum()),
                    "seconds": round(float(p["seconds"]), 6),
                    **tag,
                }
            )
            continue
        for c in p["chunks"]:
            start, end = float(c["start"]), float(c["end"])
            out.append(
                {
                    "clients": int(c["clients"]),
                    "max_steps": int(c["max_steps"]),
                    "steps": int(c["steps"]),
                    "samples": int(c["samples"]),
                    "seconds": round(end - start, 6),
                    "start": round(start, 6),
                    "end": round(end, 6),
                    **tag,
                }
            )
    return out
