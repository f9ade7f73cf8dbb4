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

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value, vmap


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


def _loss(model: nn.Module, params: dict, buffers: dict, x: torch.Tensor, y: torch.Tensor,
          m: torch.Tensor, global_params: dict, regularizer: Callable | None) -> torch.Tensor:
    """One client's local objective on one (masked) batch: mean CE + the algorithm's term."""
    logits = functional_call(model, (params, buffers), (x,))
    ce = F.cross_entropy(logits, y, reduction="none")
    loss = (ce * m).sum() / m.sum().clamp_min(1.0)
    if regularizer is not None:
        loss = loss + regularizer(params, global_params)
    return loss


def _client_step(model: nn.Module, spec: LocalSpec, params: dict, buffers: dict,
                 x: torch.Tensor, y: torch.Tensor, m: torch.Tensor, global_params: dict
                 ) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """One SGD step of one client; a step with no valid sample leaves the parameters unchanged.

    Normalization layers update ``buffers`` in place (running statistics); the caller restores
    them for clients whose step was inactive (see :func:`_keep_active`).
    """
    grads, loss = grad_and_value(_loss, argnums=1)(model, params, buffers, x, y, m,
                                                   global_params, spec.regularizer)
    active = (m.sum() > 0).to(x.dtype)
    new_params = {}
    for n, p in params.items():
        g = grads[n] + spec.weight_decay * p if spec.weight_decay else grads[n]
        new_params[n] = p - spec.lr * active * g
    return new_params, loss * active, active


def _keep_active(buffers: dict, old: dict, active: torch.Tensor) -> None:
    """Undo in-place buffer updates of inactive clients (``active`` is ``[K]`` or scalar)."""
    for n, b in buffers.items():
        a = active.reshape(-1, *([1] * (b.dim() - 1))) if active.dim() else active
        b.copy_(torch.where(a > 0, b, old[n]))


def train_clients(model: nn.Module, layout: FlatLayout, global_flat: torch.Tensor,
                  x_all: torch.Tensor, y_all: torch.Tensor, client_idx: Sequence[np.ndarray],
                  epochs: Sequence[int], seeds: Sequence[int], spec: LocalSpec,
                  vectorize: bool = True) -> TrainOutput:
    """Train K clients from the same global model.

    Parameters
    ----------
    model : a module of the right architecture (used only as a functional template).
    layout : its :class:`FlatLayout`.
    global_flat : ``[P]`` global state.
    x_all, y_all : the samples this worker holds; ``client_idx[k]`` indexes client k's rows.
    epochs : local epochs per client (variable local work, FedProx).
    seeds : per-client shuffling seeds (derived from experiment seed, round and client id).
    vectorize : stacked vmap computation (True) or one client at a time (False).
    """
    model.train()
    k = len(client_idx)
    device = global_flat.device
    sizes = [len(ix) for ix in client_idx]
    local, mask = make_schedule(sizes, epochs, seeds, spec.batch_size)
    # map each client's local indices to rows of x_all: [K, S, B]
    rows = np.stack([np.asarray(ix, dtype=np.int64)[local[i]] if len(ix) else local[i]
                     for i, ix in enumerate(client_idx)])
    rows_t = torch.from_numpy(rows).to(device)
    mask_t = torch.from_numpy(mask).to(device)
    glob = layout.unflatten(global_flat)
    gparams = {n: glob[n] for n in layout.param_names}
    n_steps = mask.shape[1]
    if vectorize:
        stacked = layout.unflatten(global_flat.expand(k, -1).clone())
        params = {n: stacked[n] for n in layout.param_names}
        buffers = {n: stacked[n].clone() for n in layout.buffer_names}
        buffers.update({n: b.expand(k, *b.shape).clone() for n, b in layout.int_buffers.items()})
        step = vmap(lambda p, b, x, y, m: _client_step(model, spec, p, b, x, y, m, gparams))
        loss_sum = torch.zeros(k, device=device)
        step_count = torch.zeros(k, device=device)
        for s in range(n_steps):
            r = rows_t[:, s]
            old = {n: b.clone() for n, b in buffers.items()} if buffers else {}
            params, loss, active = step(params, buffers, x_all[r], y_all[r], mask_t[:, s])
            if buffers:
                _keep_active(buffers, old, active)
            loss_sum += loss.detach()
            step_count += active
        new = torch.cat([params[n].reshape(k, -1) for n in layout.param_names]
                        + [buffers[n].reshape(k, -1) for n in layout.buffer_names], dim=1)
        updates = new.detach() - global_flat
        steps = step_count.cpu().numpy()
        losses = (loss_sum / step_count.clamp_min(1)).cpu().numpy()
        return TrainOutput(updates, losses, steps.astype(np.int64))
    rows_out, losses, steps = [], [], []
    for i in range(k):
        st = layout.unflatten(global_flat.clone())
        params = {n: st[n] for n in layout.param_names}
        buffers = {n: st[n] for n in layout.buffer_names}
        buffers.update({n: b.clone() for n, b in layout.int_buffers.items()})
        ls, cnt = 0.0, 0.0
        for s in range(n_steps):
            r = rows_t[i, s]
            old = {n: b.clone() for n, b in buffers.items()} if buffers else {}
            params, loss, active = _client_step(model, spec, params, buffers, x_all[r],
                                                y_all[r], mask_t[i, s], gparams)
            if buffers:
                _keep_active(buffers, old, active)
            ls += float(loss)
            cnt += float(active)
        flat = torch.cat([params[n].reshape(-1) for n in layout.param_names]
                         + [buffers[n].reshape(-1) for n in layout.buffer_names])
        rows_out.append(flat.detach() - global_flat)
        losses.append(ls / max(cnt, 1.0))
        steps.append(int(cnt))
    updates = torch.stack(rows_out) if rows_out else torch.zeros(0, layout.size)
    return TrainOutput(updates, np.asarray(losses, np.float32), np.asarray(steps, np.int64))


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
