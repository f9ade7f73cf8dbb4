"""Bytes on the wire: what each selected client downloads and uploads in a round, with the
configured compression (:mod:`simulator.compression`), priced before anything trains.

The plan (:mod:`simulator.round.plan`) asks the algorithm for each selected client's transfers
(:meth:`~simulator.algorithms.base.Algorithm.wire_bytes`, from a
:class:`~simulator.algorithms.base.WireInfo` whose label counts are computed only if the
algorithm reads them, for the cohort only), lets the compressor price them and hands both sizes
to the virtual clock. The collect step masks the rows the clients send
(:func:`compress_returned`), the server step the change of the global model (:func:`downlink`).

A compressed download is a change to the previous round's global model, so only a client that
downloaded that model can use it; every other client is sent the dense model. The store's table
``wire.held`` (declared only when downloads are compressed) keeps the round of the global model
each client last downloaded; every selected client downloads the round's model when the round
starts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from simulator.algorithms.base import Algorithm
from simulator.algorithms.exchange import WireInfo
from simulator.compression import Compressor
from simulator.round.context import RoundContext
from simulator.round.types import InFlight
from simulator.state.store import ClientStore
from simulator.training.space import ParamSpace

#: client-state table: the round of the global model the client last downloaded
HELD = "wire.held"


@dataclass(frozen=True)
class WireBytes:
    """A round's transfers, per selected client (aligned with ``plan.selected``).

    Attributes
    ----------
    upload, download : float64 bytes as sent (compressed).
    upload_full, download_full : the same transfers uncompressed (the algorithm's sizes).
    upload_entries : int64 entries of each update row that travel (the mask's ``k``).
    dense_download : the client did not hold the previous model: it was sent the whole model.
    """

    upload: np.ndarray
    download: np.ndarray
    upload_full: np.ndarray
    download_full: np.ndarray
    upload_entries: np.ndarray
    dense_download: np.ndarray

    def of(self, selected: np.ndarray, ids: set[int] | list[int]) -> dict[str, float]:
        """Upload totals of clients ``ids`` (a subset of ``selected``)."""
        at = np.isin(selected, np.fromiter(ids, np.int64, len(ids)))
        return {"upload": float(self.upload[at].sum()), "full": float(self.upload_full[at].sum())}


def label_counts(ctx: RoundContext, ids: np.ndarray) -> np.ndarray:
    """``[K, C]`` int64 counts of each client's training labels (a real partition or virtual
    clients: the rows of these clients only)."""
    rows = ctx.train_clients.rows(ids)
    y = rows.y if rows.y is not None else ctx.fed.y_train
    c = ctx.fed.dataset.num_classes
    out = np.zeros((len(ids), c), np.int64)
    for i, idx in enumerate(rows.index):
        out[i] = np.bincount(np.asarray(y[idx], np.int64), minlength=c)[:c]
    return out


def dense_bytes(
    ctx: RoundContext, ids: np.ndarray, server: dict[str, torch.Tensor] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The algorithm's ``(upload, download)`` bytes of clients ``ids`` (sorted), checked;
    ``server``: the algorithm's server state as the round starts (``WireInfo.server``)."""
    w = WireInfo(
        ids,
        ctx.space.shared_size,
        ctx.fed.dataset.num_classes,
        lambda: label_counts(ctx, ids),
        dict(ctx.fed.layout.slices),
        row_size=ctx.space.size,
        server=dict(server or {}),
    )
    up, down = ctx.algorithm.wire_bytes(w)
    up, down = np.asarray(up, np.float64), np.asarray(down, np.float64)
    for what, v in (("upload", up), ("download", down)):
        if v.shape != ids.shape or not (np.isfinite(v).all() and (v >= 0).all()):
            raise ValueError(
                f"algorithm {ctx.algorithm.name!r}: wire_bytes gave {what} bytes of shape "
                f"{v.shape} (finite, >= 0 and shape {ids.shape} expected)"
            )
    return up, down


def held_previous(store: ClientStore, ids: np.ndarray, rnd: int) -> np.ndarray:
    """Whether each client downloaded round ``rnd - 1``'s global model."""
    store.declare(HELD, (), np.int64)
    rows, present = store.get(HELD, ids)
    return present & (rows == rnd - 1)


def plan_wire(
    ctx: RoundContext,
    rnd: int,
    selected: np.ndarray,
    server: dict[str, torch.Tensor] | None = None,
) -> tuple[WireBytes, list[tuple[str, np.ndarray, np.ndarray]]]:
    """The round's transfers, and the client-state writes they imply (who now holds round
    ``rnd``'s model, when downloads are compressed); ``server``: the algorithm's server state
    as the round starts."""
    comp, row, model = ctx.compression, ctx.space.size, ctx.space.shared_size
    up, down = dense_bytes(ctx, selected, server)
    writes: list[tuple[str, np.ndarray, np.ndarray]] = []
    holds = np.zeros(len(selected), bool)
    if comp.download and len(selected):
        holds = held_previous(ctx.store, selected, rnd)
        writes.append((HELD, selected, np.full(len(selected), rnd, np.int64)))
    wire = WireBytes(
        comp.upload_bytes(up, row),
        comp.download_bytes(down, model, holds),
        up,
        down,
        comp.upload_entries(up, row),
        ~holds if comp.download else np.ones(len(selected), bool),
    )
    return wire, writes


def carried_upload(ctx: RoundContext, ids: list[int]) -> dict[str, float]:
    """Upload totals of updates trained in earlier rounds that land now (priced again: the
    price is a function of the client and the config only)."""
    if not ids:
        return {"upload": 0.0, "full": 0.0}
    arr = np.array(sorted(ids), np.int64)
    up = dense_bytes(ctx, arr)[0]
    return {
        "upload": float(ctx.compression.upload_bytes(up, ctx.space.size).sum()),
        "full": float(up.sum()),
    }


def compress_returned(
    comp: Compressor,
    wire: WireBytes,
    selected: np.ndarray,
    returned: dict[int, InFlight],
    global_shared: torch.Tensor,
) -> None:
    """Replace each returned update row by the row its client sends (a view of one new
    matrix); ``global_shared`` is the model the rows were trained from."""
    if not comp.upload or not returned:
        return
    ids = sorted(returned)
    pos = np.searchsorted(selected, ids)
    rows = torch.from_numpy(np.stack([np.asarray(returned[c].row) for c in ids]))
    keep = torch.from_numpy(wire.upload_entries[pos])
    sent = comp.compress_rows(rows, global_shared, keep).numpy()
    for i, c in enumerate(ids):
        returned[c].row = sent[i]


def check_compression(algorithm: Algorithm, comp: Compressor) -> None:
    """Refuse, in one line, to mask uploads that are not model updates (predictions, condensed
    data: the importances rank the entries of an update) and downloads that do not happen (a
    masked download changes the global model by what it sends)."""
    if comp.upload and algorithm.upload != "update":
        raise ValueError(
            f"compression {comp.name!r}: masks model updates, but algorithm {algorithm.name!r} "
            f"sends {algorithm.upload!r} (compress only the downloads: direction=down)"
        )
    if comp.download and not algorithm.downloads_model():
        hint = "compress only the uploads: direction=up" if algorithm.upload == "update" else ""
        raise ValueError(
            f"compression {comp.name!r}: masks the global model's downloads, but algorithm "
            f"{algorithm.name!r} sends clients no global model" + (f" ({hint})" if hint else "")
        )


def downlink(
    comp: Compressor, space: ParamSpace, old: torch.Tensor, new: torch.Tensor
) -> torch.Tensor:
    """The global model the server keeps and sends after its update ``new`` of ``old``: the
    compressor's choice of the shared entries' change (kept-local entries never travel)."""
    if not comp.download:
        return new
    shared = comp.downlink(space.shared_of(old), space.shared_of(new))
    return space.full_of(shared, new)
