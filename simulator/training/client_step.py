"""One client's forward pass and local objective: the functions the trainer maps over a chunk of
clients (:func:`simulator.training.stacked.train_clients`) or calls once per client.

Everything here is written for ONE client and must stay vmap-safe. The forward runs under the
step context of :mod:`simulator.training.models` (the batch mask for BatchNorm, the client's noise
draws
and the server's tensors for layers an algorithm inserted, e.g. FedFA's feature augmentation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.func import functional_call

from simulator.training.flat import FlatLayout
from simulator.training.models import BATCH_MASK, STEP_NOISE, STEP_SHARED, MaskedBatchNorm
from simulator.training.step import Finish, PlainStep, Start, Step


def splitter(layout: FlatLayout) -> Callable[[torch.Tensor], dict[str, torch.Tensor]]:
    """``[..., P] -> {name: [..., *shape]}`` views of the trainable parameters."""
    n = len(layout.param_names)
    names, numels, shapes = layout.param_names, layout.numels[:n], layout.shapes[:n]

    def split(flat: torch.Tensor) -> dict[str, torch.Tensor]:
        parts = torch.split(flat, numels, dim=-1)
        return {
            k: t.reshape(*flat.shape[:-1], *sh)
            for k, t, sh in zip(names, parts, shapes, strict=True)
        }

    return split


def global_for(gflat: torch.Tensor, k: int | None) -> torch.Tensor:
    """The global parameters as a client's step is given them: for ``k`` mapped clients a
    stride-0 ``[K, P]`` view mapped with them, ``[P]`` for one client alone (``k`` None).

    Mapped unbatched, the global model with the clients' inputs is one product over all K
    clients' rows, whose kernel, and so whose rounding, follows K (the MNIST CNN's 512x16
    layer rounds 10 rows one way alone and another beside 10 more), so a client's bits would
    follow its chunk's size. Mapped, each client's product is its own, as alone.
    """
    return gflat if k is None else gflat.expand(k, -1)


def default_method(name: str) -> Any:
    """The base :class:`~simulator.algorithms.base.Algorithm`'s method ``name``."""
    from simulator.algorithms.base import Algorithm

    return getattr(Algorithm, name)


def overrides(step: Any, name: str) -> bool:
    """Whether ``step``'s class defines ``name`` itself (not the plain/base behaviour)."""
    own = getattr(type(step), name, None)
    return own not in (getattr(PlainStep, name, None), default_method(name))


class ClientStep:
    """One client's forward pass and, for an algorithm with its own objective, its
    ``client_loss`` on the batch.

    ``shared`` are the round's server tensors, captured rather than mapped; the global
    parameters are given to each call (:func:`global_for`). ``aux`` names the client-state
    tables trained beside the model
    (:attr:`~simulator.algorithms.base.Algorithm.client_trainable`) with their sizes: they are
    the last entries of the trained vector, after the model's ``P`` parameters.
    """

    def __init__(
        self,
        model: nn.Module,
        layout: FlatLayout,
        step: Any,
        shared: dict[str, torch.Tensor],
        aux: dict[str, int] | None = None,
        noisy: bool = False,
    ) -> None:
        self.model, self.step, self.split = model, step, splitter(layout)
        self.shared = shared
        self.p = layout.num_params
        self.aux = dict(aux or {})
        #: the step's objective is the plain cross-entropy (FedAvg): no features, no second
        #: mapped call
        self.plain = not overrides(step, "client_loss")
        #: the step returns something after training (state, extras)
        self.finishes = overrides(step, "client_finish")
        #: the step moves the start of the local steps (:meth:`start`)
        self.starts = overrides(step, "client_start")
        #: the model normalizes with batch statistics, which must skip padded rows
        self.masked = any(isinstance(m, MaskedBatchNorm) for m in model.modules())
        #: the step draws noise that layers of the model read from the step context
        self.noisy = noisy

    @property
    def contextual(self) -> bool:
        """Whether the forward needs the step context (mask, noise)."""
        return self.masked or self.noisy

    def forward(
        self, params: dict, buffers: dict, x: torch.Tensor, m: torch.Tensor, nz: torch.Tensor
    ) -> Any:
        """``(features, logits)`` of one client's batch (only the logits for a plain step),
        under the batch mask and the client's noise draws of this step."""
        tokens = [
            (BATCH_MASK, BATCH_MASK.set(m)),  # BatchNorm's and FedFA's statistics
            (STEP_NOISE, STEP_NOISE.set(nz)) if self.noisy else None,
            (STEP_SHARED, STEP_SHARED.set(self.shared)) if self.noisy else None,
        ]
        try:
            return self.forward_unmasked(params, buffers, x)
        finally:
            for t in tokens:
                if t is not None:
                    t[0].reset(t[1])

    def forward_unmasked(self, params: dict, buffers: dict, x: torch.Tensor) -> Any:
        """:meth:`forward` of a model without batch statistics or noise (no context)."""
        if self.plain:
            return functional_call(self.model, (params, buffers), (x,))
        return functional_call(self.model, (params, buffers), (x,), {"with_features": True})

    def split_aux(self, vec: torch.Tensor) -> dict[str, torch.Tensor]:
        """The trained client-state tables held after the model's entries of ``vec``."""
        out, at = {}, self.p
        for name, n in self.aux.items():
            out[name] = vec[..., at : at + n]
            at += n
        return out

    def loss(
        self,
        pvec: torch.Tensor,
        buffers: dict,
        x: torch.Tensor,
        y: torch.Tensor,
        m: torch.Tensor,
        nz: torch.Tensor,
        feats: torch.Tensor,
        logits: torch.Tensor,
        ce: torch.Tensor,
        state: dict,
        gvec: torch.Tensor,
        index: torch.Tensor | None = None,
        public: bool = False,
    ) -> torch.Tensor:
        """The step's ``client_loss`` on one batch; ``gvec`` the global parameters (mapped
        with the clients: see :func:`global_for`), ``public`` for a pass over the public set,
        ``index`` its rows there."""
        pflat = pvec[: self.p] if self.aux else pvec

        def forward(p: dict, xx: torch.Tensor) -> Any:
            # (features, logits): the step is not plain. On a copy of the buffers: another
            # model's forward (the global one, a peer's) must not move this client's running
            # statistics
            own = {n: b.clone() for n, b in buffers.items()}
            if self.contextual:
                return self.forward(p, own, xx, m, nz)
            return self.forward_unmasked(p, own, xx)

        return self.step.client_loss(
            Step(
                self.split(pflat),
                pflat,
                x,
                y,
                m,
                feats,
                logits,
                ce,
                gvec,
                self.split(gvec),
                state,
                self.shared,
                forward,
                self.split_aux(pvec),
                public,
                index,
            )
        )

    def eval_forward(self, buffers: dict) -> Callable[[dict, torch.Tensor], Any]:
        """``forward(params, x) -> (features, logits)`` in evaluation mode with ``buffers``."""
        model = self.model

        def forward(p: dict, xx: torch.Tensor) -> Any:
            was = model.training
            model.eval()
            try:
                return functional_call(model, (p, buffers), (xx,), {"with_features": True})
            finally:
                model.train(was)

        return forward

    def start(
        self,
        pflat: torch.Tensor,
        state: dict,
        x: torch.Tensor,
        y: torch.Tensor,
        m: torch.Tensor,
        buffers: dict,
        noise: torch.Tensor,
        gvec: torch.Tensor,
        iterations: int,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The step's ``client_start`` for one client: its start ``[P]`` and store rows;
        ``x, y, m`` are its batches of one epoch, ``m`` marking each sample once; ``noise``
        its start's draws (``[D]``)."""
        start, rows = self.step.client_start(
            Start(
                pflat,
                gvec,
                state,
                self.shared,
                x,
                y,
                m,
                self.eval_forward(buffers),
                self.split,
                iterations,
                noise,
            )
        )
        return start, dict(rows)

    def finish(
        self,
        pvec: torch.Tensor,
        state: dict,
        steps: torch.Tensor,
        lr: float,
        x: torch.Tensor,
        y: torch.Tensor,
        m: torch.Tensor,
        buffers: dict,
        gvec: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        """The step's ``client_finish`` for one client after its local steps; ``x, y, m`` are
        its batches ``[S, B, ...]`` with ``m`` marking each sample once (its first epoch)."""
        pflat = pvec[: self.p] if self.aux else pvec
        return self.step.client_finish(
            Finish(
                pflat,
                gvec,
                state,
                self.shared,
                steps,
                lr,
                self.split_aux(pvec),
                x,
                y,
                m,
                buffers,
                self.eval_forward(buffers),
                self.split,
            )
        )
