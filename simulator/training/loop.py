"""One call of local training (:func:`simulator.training.stacked.train_clients`): the K clients'
batches and step, where their local steps start (the step's ``client_start``, :meth:`begin`) and
the SGD loop. Its two drivers, all K clients as one stacked computation (``torch.func.vmap``) or
one client at a time (the sequential reference), are in :mod:`simulator.training.drivers`."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import vmap

from simulator.training.client_step import ClientStep, global_for
from simulator.training.flat import FlatLayout
from simulator.training.noise import START_TAG, client_noise
from simulator.training.phases import Phase, grad_mask, public_phases
from simulator.training.spec import LocalSpec, client_batches
from simulator.training.step import PLAIN


class LocalTraining:
    """One call of :func:`train_clients`: the K clients' batches, their step and the SGD loop
    that runs it (:meth:`sgd`); the two ways to drive that loop are
    :func:`~simulator.training.drivers.run_stacked` and
    :func:`~simulator.training.drivers.run_one_by_one`."""

    def __init__(
        self,
        model: nn.Module,
        layout: FlatLayout,
        global_flat: torch.Tensor,
        x_all: torch.Tensor,
        y_all: torch.Tensor,
        client_idx: Sequence[np.ndarray],
        epochs: Sequence[int],
        seeds: Sequence[int],
        spec: LocalSpec,
        poisoned: Sequence[bool] | None,
        shared: dict[str, torch.Tensor],
    ) -> None:
        self.layout, self.global_flat = layout, global_flat
        step_obj = self.step_obj = spec.step if spec.step is not None else PLAIN
        self.k = k = len(client_idx)
        sizes = [len(ix) for ix in client_idx]
        device = self.device = global_flat.device
        xs, ys, mask = client_batches(
            x_all, y_all, client_idx, epochs, seeds, spec, poisoned, device
        )
        self.n_steps = mask.shape[1]
        self.mask_t = mask_t = torch.from_numpy(mask).to(device)
        self.xs, self.ys = xs, ys
        self.active = mask_t.sum(-1) > 0  # [K, S]
        self.p_num = p_num = layout.num_params
        self.gflat = gflat = global_flat[:p_num]
        self.trainable = tuple(getattr(step_obj, "client_trainable", ()))
        # the trained tables' entries, by their declared shapes (the model's, the row's, ...)
        self.aux = {t: step_obj.state_entries(t, layout) for t in self.trainable}
        n_noise = (
            int(step_obj.noise_size(model, spec.batch_size))
            if hasattr(step_obj, "noise_size")
            else 0
        )
        self.noise = client_noise(seeds, mask.shape[1], n_noise, device)
        self.private = Phase(xs, ys, mask_t, self.noise)
        self.cs = ClientStep(model, layout, step_obj, shared, self.aux, noisy=n_noise > 0)
        # the start's draws ([K, D]), from each client's own stream apart from its steps'
        n_start = (
            int(step_obj.start_noise_size(layout))
            if self.cs.starts and hasattr(step_obj, "start_noise_size")
            else 0
        )
        self.start_noise = client_noise(seeds, 1, n_start, device, tag=START_TAG)[:, 0]
        works = (mask_t.sum((1, 2)) > 0).cpu().numpy()
        self.before, self.after = public_phases(
            step_obj, shared, seeds, spec.batch_size, n_noise, self.cs.plain, works
        )
        self.randomness = "different" if getattr(step_obj, "random", False) else "error"
        self.grad_mask = grad_mask(step_obj, shared, gflat.dtype, p_num, list(self.aux.values()))
        self.lr, self.wd, self.mom = spec.lr, spec.weight_decay, spec.momentum
        self.steps = self.active.sum(-1)
        # each sample once (the first epoch's rows), for what a client computes after training
        per_epoch = torch.tensor([-(-n // spec.batch_size) for n in sizes], device=device)
        s1 = max(1, min(mask.shape[1], int(per_epoch.max()) if k else 1))  # one epoch's steps
        self.first = mask_t[:, :s1] * (
            torch.arange(s1, device=device)[None, :] < per_epoch[:, None]
        ).unsqueeze(-1).to(mask_t.dtype)
        self.xs1, self.ys1 = xs[:, :s1], ys[:, :s1]

    def start_aux(self, name: str, stored: torch.Tensor, data: tuple) -> torch.Tensor:
        """Where the trained client-state table ``name`` starts (the step's rule), from its
        stored row and the client's batches of one epoch ``data`` (x, y, mask)."""
        return self.step_obj.trainable_start(name, stored, self.gflat, data)

    def run(
        self, pvec: torch.Tensor, buffers: dict, sl: slice | int, batched: bool, own: dict
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The public passes before, the local epochs, the public passes after (each phase
        with a fresh momentum buffer); the loss sum is the local epochs'."""
        if self.before is not None:
            pvec = self.sgd(pvec, buffers, sl, batched, own, self.before)[0].requires_grad_(True)
        pvec, loss_sum = self.sgd(pvec, buffers, sl, batched, own, self.private)
        if self.after is not None:
            pvec = self.sgd(pvec.requires_grad_(True), buffers, sl, batched, own, self.after)[0]
        return pvec, loss_sum

    def sgd(
        self,
        pvec: torch.Tensor,
        buffers: dict,
        sl: slice | int,
        batched: bool,
        own: dict,
        phase: Phase,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The SGD steps of ``phase`` of the clients ``sl`` (all K stacked when ``batched``,
        else one) from ``pvec``; buffers are updated in place. Returns the trained vector(s)
        and the sum of the losses over the steps taken."""
        cs, p_num, aux, mom = self.cs, self.p_num, self.aux, self.mom
        lr, wd, randomness = self.lr, self.wd, self.randomness
        active, public = phase.active, phase.public
        lead = (pvec.shape[0],) if batched else ()
        fwd = cs.forward if cs.contextual else cs.forward_unmasked
        forward = vmap(fwd, randomness=randomness) if batched else fwd
        loss_fn = partial(cs.loss, public=True) if public else cs.loss
        term = vmap(loss_fn, randomness=randomness) if batched else loss_fn
        gvec = global_for(self.gflat, lead[0] if batched else None)
        loss_sum = torch.zeros(lead, device=self.device)
        buf = torch.zeros_like(pvec) if mom else None
        for s in range(phase.steps):
            act = active[sl, s]
            if not bool(act.any()):
                break
            params = cs.split(pvec[..., :p_num] if aux else pvec)
            old = {n: b.clone() for n, b in buffers.items()}
            x, y, m, nz = phase.batch(sl, s)
            out = (
                forward(params, buffers, x, m, nz) if cs.contextual else forward(params, buffers, x)
            )
            feats, logits = (None, out) if cs.plain else out
            if public:  # no labels: the step's own objective, from a zero cross-entropy
                zero = torch.zeros(lead, device=self.device)
                loss = term(
                    pvec, buffers, x, y, m, nz, feats, logits, zero, own, gvec, phase.index[sl, s]
                )
            else:
                ce = F.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none"
                ).reshape(m.shape)
                loss = (ce * m).sum(-1) / m.sum(-1).clamp_min(1.0)
                if not cs.plain:
                    loss = term(pvec, buffers, x, y, m, nz, feats, logits, loss, own, gvec)
            (grad,) = torch.autograd.grad(loss.sum(), pvec)
            a = act.to(pvec.dtype)
            am = a.unsqueeze(-1) if batched else a
            with torch.no_grad():
                if wd:
                    grad = grad + wd * pvec
                if self.grad_mask is not None:  # frozen entries: no step, decay or momentum
                    grad = grad * self.grad_mask
                if buf is not None:
                    buf = torch.where(am > 0, mom * buf + grad, buf)
                    grad = buf
                pvec.sub_(lr * am * grad)
                loss_sum += loss.detach() * a
                for n, b in buffers.items():
                    bm = a.reshape(-1, *([1] * (b.dim() - 1))) if batched else a
                    b.copy_(torch.where(bm > 0, b, old[n]))
        return pvec.detach(), loss_sum

    def begin(
        self, pflat: torch.Tensor, state: dict, buffers: dict, i: int | None, own: bool = True
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Where the local steps start, by the step's ``client_start`` where it overrides it:
        all K clients mapped (``i`` None; ``pflat`` ``[K, P]``; with ``own`` False no client
        has a start of its own, and each starts from the global model, mapped as
        :func:`~simulator.training.client_step.global_for` says) or client ``i`` alone.
        Returns the start(s) and the store rows the start wrote (``{}`` without a start)."""
        cs = self.cs
        if not cs.starts or not self.k:
            return pflat, {}
        if i is None:
            n_it = int(self.step_obj.start_iterations(state))
            new, rows = vmap(lambda *a: cs.start(*a, n_it))(
                pflat if own else global_for(self.gflat, self.k),
                state,
                self.xs1,
                self.ys1,
                self.first,
                buffers,
                self.start_noise,
                global_for(self.gflat, self.k),
            )
        else:
            n_it = int(self.step_obj.start_iterations({n: t[i : i + 1] for n, t in state.items()}))
            own = {n: t[i] for n, t in state.items()}
            x, y, m, nz = self.xs1[i], self.ys1[i], self.first[i], self.start_noise[i]
            new, rows = cs.start(pflat, own, x, y, m, buffers, nz, self.gflat, n_it)
        return new.detach().contiguous(), {t: v.detach() for t, v in rows.items()}
