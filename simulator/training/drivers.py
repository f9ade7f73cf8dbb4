"""The two drivers of one call of local training (:class:`~simulator.training.loop.LocalTraining`,
for :func:`simulator.training.stacked.train_clients`): all K clients as one stacked ``[K, P]``
computation mapped with ``torch.func.vmap`` (:func:`run_stacked`), or one client at a time, the
sequential reference (:func:`run_one_by_one`). Both place the given starts, begin the local
steps (:meth:`LocalTraining.begin`), run the SGD loop (:meth:`LocalTraining.run`) and the step's
finish, and return ``(updates, losses, outputs)``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.func import vmap

from simulator.training.client_step import global_for
from simulator.training.lanes import alone
from simulator.training.loop import LocalTraining


def run_stacked(
    lt: LocalTraining, starts: dict[int, torch.Tensor], state: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, np.ndarray, dict[str, torch.Tensor]]:
    """All K clients as one ``[K, P]`` computation: (updates, losses, outputs).

    A chunk of one client runs :data:`~simulator.training.lanes.ALONE`, so that its linear
    layers and convolutions compute as a chunk of two or more does.

    Parameters
    ----------
    lt : LocalTraining
        The call's clients, their batches and step.
    starts : dict[int, torch.Tensor]
        ``{position k: [P] model}`` for clients that start from their own model.
    state : dict[str, torch.Tensor]
        The clients' rows of the client-state store, ``{name: [K, ...]}``.

    Returns
    -------
    tuple[torch.Tensor, np.ndarray, dict[str, torch.Tensor]]
        The updates ``[K, P]`` (relative to the global model), the mean loss of each client's
        local steps ``[K]`` and the step's outputs ``{name: [K, ...]}``.
    """
    with alone(lt.k == 1):
        return _stacked(lt, starts, state)


def _stacked(
    lt: LocalTraining, starts: dict[int, torch.Tensor], state: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, np.ndarray, dict[str, torch.Tensor]]:
    k, layout, global_flat, p_num = lt.k, lt.layout, lt.global_flat, lt.p_num
    cs, aux = lt.cs, lt.aux
    # one [K, P] copy for the parameters, one for the float buffers (if any): at a thousand
    # clients per actor these copies are most of a round's fixed cost
    # (no copy of the parameters where the step's start builds them from the global model)
    shared_start = bool(cs.starts and k and not starts)
    pflat = lt.gflat.expand(k, -1) if shared_start else lt.gflat.expand(k, -1).clone()
    bflat = global_flat[p_num:].expand(k, -1).clone()
    for i, start in starts.items():
        pflat[i], bflat[i] = start[:p_num], start[p_num:]
    b_numels = layout.numels[len(layout.param_names) :]
    buffers = {
        n: t.reshape(k, *sh)
        for n, t, sh in zip(
            layout.buffer_names,
            torch.split(bflat, b_numels, dim=1),
            layout.shapes[len(layout.param_names) :],
            strict=True,
        )
    }
    buffers.update({n: b.expand(k, *b.shape).clone() for n, b in layout.int_buffers.items()})
    pflat, begun = lt.begin(pflat, state, buffers, None, own=not shared_start)
    if aux and k:
        pflat = torch.cat(
            [pflat]
            + [
                vmap(lambda st, x, y, m, t=t: lt.start_aux(t, st, (x, y, m)))(
                    state[t], lt.xs1, lt.ys1, lt.first
                )
                for t in lt.trainable
            ],
            dim=1,
        )
    pflat.requires_grad_(True)
    new_p, loss_sum = lt.run(pflat, buffers, slice(None), True, state)
    losses = (loss_sum / lt.steps.clamp_min(1)).cpu().numpy()
    with torch.no_grad():
        outputs = (
            vmap(cs.finish, in_dims=(0, 0, 0, None, 0, 0, 0, 0, 0))(
                new_p,
                state,
                lt.steps.to(new_p.dtype),
                lt.lr,
                lt.xs1,
                lt.ys1,
                lt.first,
                buffers,
                global_for(lt.gflat, k),
            )
            if k and cs.finishes
            else {}
        )
        outputs = {**begun, **cs.split_aux(new_p), **outputs}
    new_p = new_p[:, :p_num] if aux else new_p
    if layout.buffer_names:
        bufs = [buffers[n].reshape(k, -1) for n in layout.buffer_names]
        updates = torch.cat([new_p, *bufs], dim=1) - global_flat
    else:
        # in place only when nothing the step returned shares the parameters' memory
        base = new_p.untyped_storage().data_ptr()
        shared = any(v.untyped_storage().data_ptr() == base for v in outputs.values())
        updates = new_p - global_flat if shared else new_p.sub_(global_flat)
    return updates, losses, outputs


def run_one_by_one(
    lt: LocalTraining, starts: dict[int, torch.Tensor], state: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, np.ndarray, dict[str, torch.Tensor]]:
    """The sequential reference, one client at a time: (updates, losses, outputs), with the
    parameters and results of :func:`run_stacked`; each client runs
    :data:`~simulator.training.lanes.ALONE`, as a chunk of one."""
    with alone():
        return _one_by_one(lt, starts, state)


def _one_by_one(
    lt: LocalTraining, starts: dict[int, torch.Tensor], state: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, np.ndarray, dict[str, torch.Tensor]]:
    layout, global_flat, p_num, cs = lt.layout, lt.global_flat, lt.p_num, lt.cs
    out_rows, out_losses, outs = [], [], []
    for i in range(lt.k):
        init = starts.get(i, global_flat)
        own = {n: t[i] for n, t in state.items()}
        own_model = layout.unflatten(init)
        buffers = {n: own_model[n].clone() for n in layout.buffer_names}
        buffers.update({n: b.clone() for n, b in layout.int_buffers.items()})
        p0, begun = lt.begin(init[:p_num], state, buffers, i)
        first = (lt.xs1[i], lt.ys1[i], lt.first[i])
        pflat = torch.cat([p0] + [lt.start_aux(t, own[t], first) for t in lt.trainable])
        pflat = pflat.clone().requires_grad_(True)
        new_p, loss_sum = lt.run(pflat, buffers, i, False, own)
        bufs = [buffers[n].reshape(-1) for n in layout.buffer_names]
        out_rows.append(torch.cat([new_p[:p_num], *bufs]) - global_flat)
        out_losses.append(float(loss_sum) / max(int(lt.steps[i]), 1))
        with torch.no_grad():
            fin = (
                cs.finish(
                    new_p,
                    own,
                    lt.steps[i].to(new_p.dtype),
                    lt.lr,
                    lt.xs1[i],
                    lt.ys1[i],
                    lt.first[i],
                    buffers,
                    lt.gflat,
                )
                if cs.finishes
                else {}
            )
            outs.append({**begun, **cs.split_aux(new_p), **fin})
    updates = torch.stack(out_rows) if out_rows else torch.zeros(0, layout.size)
    losses = np.asarray(out_losses, np.float32)
    outputs = {n: torch.stack([o[n] for o in outs]) for n in outs[0]} if outs else {}
    return updates, losses, outputs
