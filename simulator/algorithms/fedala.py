"""FedALA (J. Zhang, Y. Hua, H. Wang, T. Song, Z. Xue, R. Ma, H. Guan, "FedALA: Adaptive Local
Aggregation for Personalized Federated Learning", AAAI 2023; the lab deck seed, lines 1743-1846;
notes: ``shared/notes/methods-ktpfl-fedma-fedala-fedvb-siren.md`` section 3).

Each client keeps its local model Theta_i (table ``local``, the trainable parameters). Before its
local training it does not overwrite Theta_i with the received global model Theta but mixes the
two element-wise (the *adaptive local aggregation*, ALA):

    Theta_hat_i = Theta_i + (Theta - Theta_i) (.) [1; W_i],

where the element-wise weights W_i cover the top ``p`` layers only and the lower layers take the
global values. W_i (table ``ala_w``) starts at 1, and each round it is learned on a random
``s`` % sample of the client's training data by SGD on the weights alone,

    W_i <- clip(W_i - eta * dL(Theta_hat_i)/dW_i, 0, 1),
    dL/dW_i = dL/dTheta_hat_i (.) (Theta - Theta_i)   (on the top layers),

one step per batch of the sample (the client's batch size), Theta_hat recomputed after each step.
In a client's first ALA round W trains until the standard deviation of the last 10 epoch losses
(the loss of the sample's last batch in each epoch) is below 0.1; afterwards for one epoch over
the sample. Ordinary local training (the client optimizer, ``--local-epochs``) then starts from
Theta_hat_i; the trained model goes back to the store as the new Theta_i and the upload is the
usual update (trained minus global), aggregated as FedAvg's: the communication is FedAvg's.
The per-client evaluation scores each client with its local model (``personal = "local"``; a
client that never trained: the global model).

Parameters: ``s`` (percent of the local data sampled for ALA, default 80, the paper's), ``p``
(top layers that get weights, default 1: the head), ``eta`` (1.0, the paper's) and ``cap``
(epochs at most in the first ALA round, default 20; see below).

Choices and departures:

* **Layers.** A layer is a module of the model: the flat layout's named tensors grouped by
  their name without the last component (``head.weight`` and ``head.bias`` are the layer
  ``head``; ``body.1.weight``, ``body.1.bias`` the layer ``body.1``; a BatchNorm's weight and bias
  one layer). ``p`` counts such layers from the top of the layout order, so ``p = 1`` is the
  classifier head, which the paper's code (``layer_idx = 2``: its weight and bias tensors)
  means. Buffers (BatchNorm's running statistics) always take the global values.
* **First ALA round.** The paper's code skips ALA while a client's local model equals the global
  one (its first round) and runs its convergence loop the first time they differ; here a client
  that never trained starts from the global model (table ``ala_phase``: 0 never trained, 1
  trained once, 2 past its first ALA round), the next round is its first ALA round. The loop
  has no bound in the paper; here it stops after ``cap`` epochs at most (vmap-safe: every client
  of a chunk runs the chunk's epochs, a per-client mask freezes W once the client has
  converged or, after its first ALA round, after one epoch).
  :meth:`FedALA.start_iterations` asks for ``cap`` epochs only when a client of the chunk is
  in its first ALA round (1 otherwise, 0 when none has a local model): the rule needs 11
  epochs at least, so such a chunk costs ``cap`` epochs over the sample, later rounds one.
* **Sample.** The paper's code takes a random contiguous window of ``int(s% * n)`` samples; here
  the first ``floor(s * n / 100)`` samples of the client's seeded first-epoch order, batched as
  in that epoch (batch size B; the last batch may be partial and its loss is the one the
  convergence rule reads, as in the paper's code). The same sample serves every ALA epoch of
  the round.
* **Forward.** ALA's losses use the model in evaluation mode with the global buffers (no batch
  statistics or noise); when the weighted layers are exactly the head (``p = 1``) the
  representation is computed once per round (the lower layers are the global ones, which W
  does not move) and each W step runs the head alone, its gradient in closed form: a round
  past the first ALA round adds one forward of the lower layers over an epoch of the client's
  data and a head step per batch of the sample (about 0.7 of FedAvg's client-updates/s on the
  digits MLP, ``benchmarks/algorithm_throughput.py --algorithm fedala``). Other ``p`` go
  through autograd and the whole forward per batch.
* **Storage.** W is a table of the top ``p`` layers' entries (its size a callable of the layout,
  :attr:`Algorithm.client_state`), beside Theta_i (the trainable parameters) and the phase.
* **Evaluation.** The paper evaluates Theta_hat_i (ALA of the newest global model, before the
  next round's training); here the stored Theta_i after its latest local training.
* **Received model.** ALA mixes in the start the trainer would use (``Start.flat``): the round's
  global model, or a client's own start where a defense gives one (Siren's alarming clients).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from simulator.algorithms import register
from simulator.algorithms.base import Algorithm
from simulator.algorithms.params import Param
from simulator.config.fields import ConfigError
from simulator.training.lanes import chunk_linear
from simulator.training.step import Finish, Start

#: the client-state tables: the local model, the ALA weights, the phase (0, 1, 2)
LOCAL, WEIGHTS, PHASE = "local", "ala_w", "ala_phase"
#: the first ALA round's rule: std of the last WINDOW epoch losses below THRESHOLD
WINDOW, THRESHOLD = 10, 0.1


def layers(names: list[str]) -> list[str]:
    """The model's layers (module names: a tensor name without its last component) in order."""
    out: list[str] = []
    for n in names:
        mod = n.rpartition(".")[0]
        if not out or out[-1] != mod:
            out.append(mod)
    return out


def ala_sample(mask: torch.Tensor, percent: int) -> torch.Tensor:
    """``[S1, B]``: the first ``floor(percent * n / 100)`` samples (``n = mask.sum()``) of the
    batches of one epoch, in their order (vmap-safe)."""
    n_s = torch.div(mask.sum() * percent, 100, rounding_mode="floor")
    pos = torch.cumsum(mask.reshape(-1), 0).reshape(mask.shape)
    return mask * (pos <= n_s).to(mask.dtype)


def masked_ce(logits: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the rows ``mask`` marks (0 for none)."""
    ce = F.cross_entropy(logits, y, reduction="none")
    return (ce * mask).sum() / mask.sum().clamp_min(1.0)


def settled(losses: list[torch.Tensor]) -> torch.Tensor:
    """The first ALA round's stop rule (the paper's code): more than WINDOW epoch losses and the
    (population) standard deviation of the last WINDOW below THRESHOLD."""
    if len(losses) <= WINDOW:
        return torch.zeros((), dtype=torch.bool, device=losses[0].device)
    return torch.stack(losses[-WINDOW:]).std(correction=0) < THRESHOLD


@register
class FedALA(Algorithm):
    name = "fedala"
    params = {
        "s": Param(80, "percent of the local data sampled for ALA", lambda v: 1 <= v <= 100,
                   "in [1, 100]", int),
        "p": Param(1, "top layers weighted by ALA (1 = the head)", lambda v: v >= 1, ">= 1", int),
        "eta": Param(1.0, "learning rate of the ALA weights", lambda v: v > 0, "> 0"),
        "cap": Param(20, "ALA epochs at most in a client's first ALA round (the rule needs 11)",
                     lambda v: v >= 1, ">= 1", int),
    }  # fmt: skip
    personal = LOCAL

    @property
    def client_state(self) -> dict[str, Any]:  # type: ignore[override]
        """The local model (trainable parameters), W (the top layers' entries), the phase."""
        return {LOCAL: "params", WEIGHTS: self.weighted_size, PHASE: 1}

    def weighted(self, names: list[str]) -> list[str]:
        """The names of the top ``p`` layers' tensors (a tail of ``names``, the trainable
        parameters in layout order)."""
        found = layers(names)
        if self.p["p"] > len(found):
            raise ConfigError(
                f"algorithm.algorithm_params: fedala p={self.p['p']} invalid; the model has "
                f"{len(found)} layers: {found}"
            )
        return [n for n in names if n.rpartition(".")[0] in found[-self.p["p"] :]]

    def weighted_size(self, layout: Any) -> int:
        """Entries of W: those of the top ``p`` layers of ``layout`` (a FlatLayout)."""
        sizes = dict(zip(layout.param_names, layout.numels, strict=False))
        return sum(sizes[n] for n in self.weighted(list(layout.param_names)))

    def local_parameters(self, names: list[str]) -> list[str]:
        """None (every entry is shared). Checks ``p`` against the model's layers (called with
        the layout's names when a run is set up)."""
        self.weighted(names)
        return []

    def start_iterations(self, state: dict[str, torch.Tensor]) -> int:
        """``cap`` if a client of the chunk is in its first ALA round, else 1 (0 when none has
        a local model yet)."""
        phase = state[PHASE]
        if not bool((phase >= 1).any()):
            return 0
        return self.p["cap"] if bool((phase == 1).any()) else 1

    def client_start(self, s: Start) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Theta_hat_i and the learned W_i (see the module docstring); for ONE client."""
        parts = s.split(s.flat)
        top = self.weighted(list(parts))
        cut = s.flat.shape[-1] - sum(parts[n].numel() for n in top)
        phase, stored = s.state[PHASE][0], s.state[WEIGHTS]
        g_top = s.flat[cut:]
        l_top = torch.where(phase >= 1, s.state[LOCAL][cut:], g_top)
        diff = g_top - l_top
        w = torch.where(phase >= 2, stored, torch.ones_like(diff))
        if s.iterations > 0:
            w = self.learn(s, parts, top, l_top, diff, w, phase)
        # a client without local work (no samples or no epochs) keeps its start and its rows
        work = s.mask.sum() > 0
        start = torch.cat([s.flat[:cut], torch.where(work, l_top + diff * w, g_top)])
        return start, {WEIGHTS: torch.where(work, w, stored)}

    def learn(
        self,
        s: Start,
        parts: dict[str, torch.Tensor],
        top: list[str],
        l_top: torch.Tensor,
        diff: torch.Tensor,
        w: torch.Tensor,
        phase: torch.Tensor,
    ) -> torch.Tensor:
        """W after ``s.iterations`` epochs over the ALA sample, each client's epochs past its
        own need frozen (vmap-safe). ``parts``: the received model by name, ``top``: the names
        of the weighted layers' tensors (the tail of the layout)."""
        sample = ala_sample(s.mask, self.p["s"])
        nb = sample.shape[0]
        track = s.iterations > WINDOW  # the stop rule can fire only after WINDOW epochs
        step = self.w_step(s, parts, top, l_top, diff, sample, track)
        if track:  # the sample's last batch, whose loss the stop rule reads
            last = (torch.arange(nb, device=sample.device) * (sample.sum(-1) > 0)).max()
        on, first = phase >= 1, phase == 1
        done = torch.zeros((), dtype=torch.bool, device=w.device)
        losses: list[torch.Tensor] = []
        for e in range(s.iterations):
            # a frozen client's step is 0: W stays put exactly (it is in [0, 1] already)
            rate = (on if e == 0 else on & first & ~done).to(w.dtype) * self.p["eta"]
            final = torch.zeros((), device=w.device)
            for b in range(nb):
                g, value = step(w, b)
                w = w.sub(g.mul_(rate)).clamp(0.0, 1.0)
                if track:
                    final = torch.where(last == b, value, final)
            losses.append(final)
            done = done | settled(losses)
        return w

    @staticmethod
    def w_step(
        s: Start,
        parts: dict[str, torch.Tensor],
        top: list[str],
        l_top: torch.Tensor,
        diff: torch.Tensor,
        sample: torch.Tensor,
        track: bool,
    ) -> Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]]:
        """``(W, b) -> (dL/dW, L)``: the masked cross-entropy of Theta_hat(W) on the sample's
        batch ``b`` and its gradient (L only with ``track``, else 0). When W weights the head
        alone (the model's linear classifier), the representation under the global lower
        layers is computed once and the gradient in closed form: ``dL/dlogits = (softmax -
        onehot) * m / n``, ``dL/dweight = dL/dlogits^T h``, ``dL/dbias = sum_rows
        dL/dlogits``, times ``Theta - Theta_i``. Otherwise by autograd through the forward."""
        if top == ["head.weight", "head.bias"]:
            nb, c = sample.shape[0], parts["head.bias"].shape[0]
            h = s.forward(parts, s.x.reshape(-1, *s.x.shape[2:]))[0]
            h = h.reshape(nb, -1, h.shape[-1])
            share = (sample / sample.sum(-1, keepdim=True).clamp_min(1.0)).unsqueeze(-1)
            target = (s.y.unsqueeze(-1) == torch.arange(c, device=h.device)) * share
            minus = target.neg()
            zero = torch.zeros((), device=h.device)

            def head_step(wv: torch.Tensor, b: int) -> tuple[torch.Tensor, torch.Tensor]:
                vec = torch.addcmul(l_top, diff, wv)
                logits = chunk_linear(h[b], vec[:-c].reshape(c, -1), vec[-c:])
                # the probabilities from the log-probabilities whether or not the loss is
                # tracked: ``track`` follows the chunk (its iterations), and softmax rounds
                # otherwise, so a client's W followed the clients trained beside it
                logp = logits.log_softmax(-1)
                prob = logp.exp()
                d = torch.addcmul(minus[b], prob, share[b])  # dL/dlogits
                grad = torch.cat([(d.T @ h[b]).reshape(-1), d.sum(0)]).mul_(diff)
                return grad, -(logp * target[b]).sum() if track else zero

            return head_step
        numels, shapes = [parts[n].numel() for n in top], [parts[n].shape for n in top]
        lower = {n: t for n, t in parts.items() if n not in top}

        def loss(wv: torch.Tensor, b: int) -> torch.Tensor:
            vec = l_top + diff * wv
            split = zip(top, vec.split(numels), shapes, strict=True)
            params = {**lower, **{n: t.reshape(sh) for n, t, sh in split}}
            return masked_ce(s.forward(params, s.x[b])[1], s.y[b], sample[b])

        return torch.func.grad_and_value(loss)

    def client_finish(self, f: Finish) -> dict[str, torch.Tensor]:
        """The trained model as the new Theta_i; the phase moves 0 -> 1 -> 2 (both kept by a
        client that took no step)."""
        work = f.steps > 0
        return {
            LOCAL: torch.where(work, f.flat, f.state[LOCAL]),
            PHASE: torch.where(work, (f.state[PHASE] + 1).clamp(max=2.0), f.state[PHASE]),
        }
