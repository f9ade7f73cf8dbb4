"""Local training of many clients as one stacked computation.

What a client computes (its SGD steps on its local objective) is defined once, for one client, in
:func:`_client_step`. How it runs is separate: :func:`train_clients` either maps that step over a
stack of K clients with ``torch.func.vmap`` (one batched computation: the source of FedSentry's
speed) or loops over the clients one at a time (the sequential reference). Both paths use the same
batch schedule and padding, so they agree to float rounding.

Clients with fewer samples or fewer epochs (FedProx partial work) are masked, not split off: a
client whose schedule has ended takes no further step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap


class FlatLayout:
    """Maps a model's float state (parameters, then float buffers) to one flat vector.

    The flat vector is the unit the whole engine passes around: the global model, and each
    client's update as one row of the ``[K, P]`` update batch.
    """

    def __init__(self, model: nn.Module) -> None:
        self.param_names = [n for n, _ in model.named_parameters()]
        self.buffer_names = [n for n, b in model.named_buffers() if b.is_floating_point()]
        self.int_buffers = {n: b.clone() for n, b in model.named_buffers()
                            if not b.is_floating_point()}
        state = dict(model.named_parameters()) | dict(model.named_buffers())
        self.names = self.param_names + self.buffer_names
        self.shapes = [tuple(state[n].shape) for n in self.names]
        self.numels = [int(np.prod(s)) if s else 1 for s in self.shapes]
        self.num_params = sum(self.numels[: len(self.param_names)])
        self.size = sum(self.numels)

    def flatten(self, model: nn.Module) -> torch.Tensor:
        state = dict(model.named_parameters()) | dict(model.named_buffers())
        return torch.cat([state[n].detach().reshape(-1).float() for n in self.names])

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Split ``[..., P]`` into named tensors of shape ``[..., *shape]`` (views)."""
        lead = flat.shape[:-1]
        parts = torch.split(flat, self.numels, dim=-1)
        return {n: p.reshape(*lead, *s) for n, p, s in zip(self.names, parts, self.shapes,
                                                             strict=True)}

    def load(self, model: nn.Module, flat: torch.Tensor) -> nn.Module:
        """Copy a flat vector into a module in place."""
        tensors = self.unflatten(flat)
        with torch.no_grad():
            for n, t in (dict(model.named_parameters()) | dict(model.named_buffers())).items():
                if n in tensors:
                    t.copy_(tensors[n])
        return model


@dataclass(frozen=True)
class LocalSpec:
    """Client optimizer settings (plain SGD) and the algorithm's local objective hook.

    ``regularizer(params, global_params) -> scalar`` is added to the client's loss; it must be a
    picklable, vmap-safe function of tensors (FedProx's proximal term; FedDyn's and MOON's terms
    plug in here). ``None`` means plain empirical risk (FedAvg).
    """

    lr: float
    batch_size: int
    weight_decay: float = 0.0
    regularizer: Callable[[dict, dict], torch.Tensor] | None = None
    #: a data attack (``attacks.base.DataAttack``) applied to the batches of poisoned clients
    data_attack: Any = None
    num_classes: int = 0


@dataclass(frozen=True)
class TrainOutput:
    """What a batch of clients returns: one update row per client."""

    updates: torch.Tensor   # [K, P] new local state minus the global state
    losses: np.ndarray      # [K] mean training loss over the client's steps
    steps: np.ndarray       # [K] SGD steps taken


def make_schedule(sizes: Sequence[int], epochs: Sequence[int], seeds: Sequence[int],
                  batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Batch schedule for K clients: local sample indices ``[K, S, B]`` and a validity mask.

    Client k reshuffles its ``sizes[k]`` samples each epoch (seeded by ``seeds[k]``) and takes
    ``ceil(n_k / B)`` steps per epoch, the last one partial; S is the longest schedule.
    """
    steps = [int(e) * -(-int(n) // batch_size) for n, e in zip(sizes, epochs, strict=True)]
    s_max = max(steps) if steps else 0
    k = len(sizes)
    idx = np.zeros((k, max(s_max, 1), batch_size), dtype=np.int64)
    mask = np.zeros((k, max(s_max, 1), batch_size), dtype=np.float32)
    for i, (n, e, seed) in enumerate(zip(sizes, epochs, seeds, strict=True)):
        n = int(n)
        rng = np.random.default_rng(seed)
        nb = -(-n // batch_size)
        pad = nb * batch_size - n
        for ep in range(int(e)):
            order = np.concatenate([rng.permutation(n), np.zeros(pad, dtype=np.int64)])
            valid = np.concatenate([np.ones(n, np.float32), np.zeros(pad, np.float32)])
            idx[i, ep * nb:(ep + 1) * nb] = order.reshape(nb, batch_size)
            mask[i, ep * nb:(ep + 1) * nb] = valid.reshape(nb, batch_size)
    return idx, mask


def _client_losses(forward: Callable, params: dict, buffers: dict, x: torch.Tensor,
                   y: torch.Tensor, m: torch.Tensor, global_params: dict,
                   regularizer: Callable | None, batched: bool) -> torch.Tensor:
    """Local objective of each client on its current (masked) batch: mean CE + algorithm term.

    ``x`` is ``[K, B, ...]`` when ``batched`` (params stacked on dim 0), else ``[B, ...]``.
    Returns ``[K]`` (or a scalar): clients are independent, so the gradient of the sum with
    respect to the stacked parameters is each client's own gradient.
    """
    logits = forward(params, buffers, x)
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none")
    ce = ce.reshape(m.shape)
    loss = (ce * m).sum(-1) / m.sum(-1).clamp_min(1.0)
    if regularizer is not None:
        reg = vmap(regularizer, in_dims=(0, None)) if batched else regularizer
        loss = loss + reg(params, global_params)
    return loss


def train_clients(model: nn.Module, layout: FlatLayout, global_flat: torch.Tensor,
                  x_all: torch.Tensor, y_all: torch.Tensor, client_idx: Sequence[np.ndarray],
                  epochs: Sequence[int], seeds: Sequence[int], spec: LocalSpec,
                  vectorize: bool = True, poisoned: Sequence[bool] | None = None,
                  starts: dict[int, torch.Tensor] | None = None) -> TrainOutput:
    """Train K clients from the same global model with local SGD.

    Parameters
    ----------
    model : a module of the right architecture (used only as a functional template).
    layout : its :class:`FlatLayout`.
    global_flat : ``[P]`` global state.
    x_all, y_all : the samples this worker holds; ``client_idx[k]`` indexes client k's rows.
    epochs : local epochs per client (variable local work, FedProx).
    seeds : per-client shuffling seeds (derived from experiment seed, round and client id).
    vectorize : all K clients as one stacked computation (True), or one at a time (False).
    poisoned : which clients are malicious; their batches go through ``spec.data_attack``.
    starts : ``{position k: [P] model}`` for clients that start from their own model instead of
        the global one (Siren's alarming clients); their update is still relative to the global.

    Notes
    -----
    The stacked path keeps the K clients' parameters in one ``[K, P]`` leaf tensor, runs the
    model's forward under ``torch.func.vmap`` and differentiates the sum of the per-client
    losses with ordinary autograd; one SGD step is then a single ``[K, P]`` update.
    Normalization buffers are stacked too and updated in place by the forward.

    Known limitation: a partial last batch is padded to ``B`` rows (masked out of the loss), and
    BatchNorm's batch statistics include those padded rows, so a BN model's step on a partial
    batch differs from plain PyTorch on the shorter batch (models without BN match exactly;
    ``tests/test_models_training.py`` keeps a strict xfail on this).
    """
    model.train()
    k = len(client_idx)
    sizes = [len(ix) for ix in client_idx]
    local, mask = make_schedule(sizes, epochs, seeds, spec.batch_size)
    rows = np.stack([np.asarray(ix, dtype=np.int64)[local[i]] if len(ix) else local[i]
                     for i, ix in enumerate(client_idx)])
    device = global_flat.device
    rows_t = torch.from_numpy(rows).to(device)
    mask_t = torch.from_numpy(mask).to(device)
    xs, ys = x_all[rows_t], y_all[rows_t]          # [K, S, B, ...]: one gather per round
    if spec.data_attack is not None and poisoned is not None:
        for i in np.flatnonzero(np.asarray(poisoned, dtype=bool)):
            xs[i], ys[i] = spec.data_attack.poison(xs[i], ys[i], num_classes=spec.num_classes,
                                                   seed=int(seeds[i]))
    active = mask_t.sum(-1) > 0                     # [K, S]
    p_num = layout.num_params
    glob = layout.unflatten(global_flat)
    gparams = {n: glob[n] for n in layout.param_names}
    pnames = layout.param_names
    pnumels = layout.numels[: len(pnames)]
    pshapes = layout.shapes[: len(pnames)]

    def fwd(p: dict, b: dict, x: torch.Tensor) -> torch.Tensor:
        return functional_call(model, (p, b), (x,))

    def run(pflat: torch.Tensor, buffers: dict, sl: slice | int, batched: bool
            ) -> tuple[torch.Tensor, torch.Tensor]:
        lead = (pflat.shape[0],) if batched else ()
        forward = vmap(fwd) if batched else fwd
        loss_sum = torch.zeros(lead, device=device)
        for s in range(mask.shape[1]):
            act = active[sl, s]
            if not bool(act.any()):
                break
            parts = torch.split(pflat, pnumels, dim=-1)
            params = {n: t.reshape(*lead, *sh) for n, t, sh in zip(pnames, parts, pshapes,
                                                                   strict=True)}
            old = {n: b.clone() for n, b in buffers.items()}
            loss = _client_losses(forward, params, buffers, xs[sl, s], ys[sl, s],
                                  mask_t[sl, s], gparams, spec.regularizer, batched)
            (grad,) = torch.autograd.grad(loss.sum(), pflat)
            a = act.to(pflat.dtype)
            with torch.no_grad():
                if spec.weight_decay:
                    grad = grad + spec.weight_decay * pflat
                pflat.sub_(spec.lr * (a.unsqueeze(-1) if batched else a) * grad)
                loss_sum += loss.detach() * a
                for n, b in buffers.items():
                    am = a.reshape(-1, *([1] * (b.dim() - 1))) if batched else a
                    b.copy_(torch.where(am > 0, b, old[n]))
        return pflat.detach(), loss_sum

    steps = active.sum(-1)
    if vectorize:
        init = global_flat.expand(k, -1).clone()
        for i, start in (starts or {}).items():
            init[i] = start
        pflat = init[:, :p_num].clone().requires_grad_(True)
        stacked = layout.unflatten(init)
        buffers = {n: stacked[n].clone() for n in layout.buffer_names}
        buffers.update({n: b.expand(k, *b.shape).clone() for n, b in layout.int_buffers.items()})
        new_p, loss_sum = run(pflat, buffers, slice(None), True)
        bufs = [buffers[n].reshape(k, -1) for n in layout.buffer_names]
        updates = torch.cat([new_p, *bufs], dim=1) - global_flat
        losses = (loss_sum / steps.clamp_min(1)).cpu().numpy()
    else:
        out_rows, out_losses = [], []
        for i in range(k):
            init = (starts or {}).get(i, global_flat)
            pflat = init[:p_num].clone().requires_grad_(True)
            own = layout.unflatten(init)
            buffers = {n: own[n].clone() for n in layout.buffer_names}
            buffers.update({n: b.clone() for n, b in layout.int_buffers.items()})
            new_p, loss_sum = run(pflat, buffers, i, False)
            bufs = [buffers[n].reshape(-1) for n in layout.buffer_names]
            out_rows.append(torch.cat([new_p, *bufs]) - global_flat)
            out_losses.append(float(loss_sum) / max(int(steps[i]), 1))
        updates = torch.stack(out_rows) if out_rows else torch.zeros(0, layout.size)
        losses = np.asarray(out_losses, np.float32)
    return TrainOutput(updates.detach(), np.asarray(losses, np.float32),
                       steps.cpu().numpy().astype(np.int64))


@torch.no_grad()
def evaluate(model: nn.Module, layout: FlatLayout, flat: torch.Tensor, x: torch.Tensor,
             y: torch.Tensor, batch: int = 2048) -> tuple[float, float]:
    """Accuracy and mean cross-entropy of the model ``flat`` on ``(x, y)``."""
    layout.load(model, flat)
    model.eval()
    correct, loss_sum = 0, 0.0
    for i in range(0, len(y), batch):
        out = model(x[i:i + batch])
        loss_sum += float(F.cross_entropy(out, y[i:i + batch], reduction="sum"))
        correct += int((out.argmax(1) == y[i:i + batch]).sum())
    n = max(len(y), 1)
    return correct / n, loss_sum / n


@torch.no_grad()
def score_models(model: nn.Module, layout: FlatLayout, models: torch.Tensor, x: torch.Tensor,
                 y: torch.Tensor) -> dict[str, np.ndarray]:
    """Accuracy, mean cross-entropy and mean softmax entropy of each row of ``models`` on
    ``(x, y)`` (Sageflow's entropy filter and Siren's root-set screening read these)."""
    acc, loss, ent = [], [], []
    for row in models:
        layout.load(model, row)
        model.eval()
        out = model(x)
        logp = F.log_softmax(out, dim=1)
        acc.append(float((out.argmax(1) == y).float().mean()))
        loss.append(float(F.nll_loss(logp, y)))
        ent.append(float(-(logp.exp() * logp).sum(1).mean()))
    return {"accuracy": np.array(acc), "loss": np.array(loss), "entropy": np.array(ent)}
