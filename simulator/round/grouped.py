"""A round's kept-local entries per model group: where each client's start model comes from
(its group's global model with its own kept-local entries from the store) and where its
trained entries go back (its group's ``local`` table). With one group these are the single
``local`` table and the whole global state, as before model groups existed."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from simulator.state.store import ClientStore
from simulator.training.groups import group_of, table_name
from simulator.training.space import ParamSpace


def local_starts(
    store: ClientStore,
    spaces: Sequence[ParamSpace],
    offsets: Sequence[int],
    ids: np.ndarray,
    global_flat: torch.Tensor,
    starts: dict[int, np.ndarray],
) -> dict[int, np.ndarray]:
    """``starts`` plus the start model of every client of ``ids`` that has kept-local entries
    in the store: its group's global model (or the start it already has) with those entries.

    Parameters
    ----------
    spaces : each group's shared and kept-local entries.
    offsets : where each group's flat model starts in ``global_flat`` (and, last, its size).
    """
    if not len(ids):
        return starts
    grp = group_of(ids, len(spaces))
    g_all = global_flat.numpy()
    for g, sp in enumerate(spaces):
        sel = ids if len(spaces) == 1 else ids[grp == g]
        if sp.local is None or not len(sel):
            continue
        local, present = store.get(table_name("local", g), sel)
        base_g = g_all if len(spaces) == 1 else g_all[offsets[g] : offsets[g + 1]]
        for c, row, ok in zip(sel.tolist(), local, present.tolist(), strict=True):
            if ok:
                base = np.array(starts.get(c, base_g), dtype=np.float32, copy=True)
                base[sp.local] = row
                starts[c] = base
    return starts


def local_writes(
    spaces: Sequence[ParamSpace], ids: np.ndarray, local: np.ndarray
) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """The store writes of the trained kept-local entries ``local`` (``[K, W]``, a row per
    client of ``ids``, zero-padded to the widest group's entries): (table, ids, rows) per
    group."""
    if len(spaces) == 1:
        return [("local", ids, local)]
    grp = group_of(ids, len(spaces))
    out = []
    for g, sp in enumerate(spaces):
        m = grp == g
        if sp.local is not None and m.any():
            out.append((table_name("local", g), ids[m], local[m, : len(sp.local)]))
    return out
