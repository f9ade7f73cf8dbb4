"""FedMA, federated matched averaging (H. Wang, M. Yurochkin, Y. Sun, D. Papailiopoulos, Y.
Khazaeni, "Federated Learning with Matched Averaging", ICLR 2020; the lab deck seed, lines
738-984; notes ``shared/notes/methods-ktpfl-fedma-fedala-fedvb-siren.md`` section 2; the matching
cost of PFNM, M. Yurochkin et al., "Bayesian Nonparametric Federated Learning of Neural
Networks", ICML 2019).

Hidden neurons can be permuted freely (``sigma(x W1 Pi) Pi^T W2``), so averaging two clients'
layers coordinate by coordinate averages unrelated neurons. FedMA matches the neurons of a layer
across clients first (:mod:`simulator.algorithms.fedma_match`: the Hungarian algorithm on the
PFNM score, parameters ``sigma``, ``sigma0``, ``gamma0``, or ``cost=l2`` with a new-neuron cost
``epsilon``; ``iters`` passes), averages the matched ones, lets the global layer grow by the
neurons nobody shares, and permutes each client's next layer to the global order
(:mod:`simulator.algorithms.fedma_merge`). The last layer
(the classifier) is the label-weighted average ``W_N[k] = sum_j p_jk W_jN[k]``, ``p_jk`` client
``j``'s share of the samples of class ``k`` (each client sends its class counts as the extra
``fedma_counts``). Matching reads the clients' models themselves (:attr:`reads_rows`: trained =
global + row).

Modes (``mode``):

* ``layerwise`` (the paper's Algorithm 1): a pass over the N layers takes N rounds. Round 1 of a
  pass (stage 0): the clients train the whole model from the global one; the server matches
  layer 1. Stage ``n`` (0-based, ``0 < n < N - 1``): each client starts from the global layers
  below ``n`` (frozen by the sent ``train_mask``: no step, decay or momentum) and its own
  layers from ``n`` up, its layer ``n``'s inputs permuted to the global order of layer ``n - 1``
  (the permutation the server wrote into its store row at the previous stage); it trains the
  layers from ``n`` up and the server matches layer ``n``. Stage ``N - 1``: the clients train
  the classifier alone and the server takes the label-weighted average. The next pass starts
  over from the global model (the paper's FedMA with communication restarts from the matched
  model too; there the clients rebuild models of their original size from the matching, here
  every client trains the whole global model, the layout being fixed). Between stages the global
  layers above the matched one are the sample-weighted average of the clients' models (the next
  layer with its inputs in the global order): what a client starts from when it missed the
  previous stage (the paper assumes every client takes part in every stage; under partial
  participation such a client trains that average and is matched like the others).
* ``oneshot`` (the one-shot matching of PFNM and FedMA's Sec. 3): each client trains E epochs
  from its OWN initialisation (torch's default for a Linear layer, drawn from the client's own
  seeded stream: :meth:`start_noise_size`, :func:`~simulator.algorithms.fedma_layers.own_init`),
  ignoring the received model; the server matches every layer once, bottom up, and takes the
  label-weighted classifier. Each round is such a merge (the clients initialise the neurons the
  received model has active); the global model never feeds back into training.
* ``naive``: the baseline of the one-shot setting: the same clients, the same own
  initialisations and training, merged by FedAvg's coordinate-wise average (the defended
  aggregate).

Growth and the fixed flat layout: the model is built with each hidden layer ``ceil(hidden *
growth)`` wide (:func:`~simulator.algorithms.fedma_layers.widen`), the neurons beyond the
initial width exactly zero in and out, hence inactive under ReLU for good. Matching places the
global neurons at the first slots and zeroes the rest; a layer never grows past its cap (with
no free slot left a client's neurons must match existing ones). The widths the last matching
gave are in the server state ``fedma_width``. MLP only (``mlp``, ``mlp1``, norm ``none``): the
CNN's channels would match the same way, but its flatten between the conv and the dense layers
needs block permutations; other models are refused in one line.

Defenses and attacks: matching reads the raw rows, and a permutation makes coordinate-wise
rules meaningless (the median of neurons that are not the same neuron), while distance-based
screens see clients as far apart as their permutations are: FedMA accepts only ``fedavg``
(:attr:`rules`; any other rule is refused in one line), and only the synchronous round
policies whose rows are all trained from the round's global model (:attr:`policies`). Data
attacks apply (the class counts are of the labels a client trains on); a model attack's row
is matched as the model its client sends. ``server_lr`` must be 1 except in ``naive`` mode.

Bytes on the wire (:meth:`wire_bytes`, float32): ``layerwise`` uploads the layers the stage
trains (frozen ones are exact zeros in the row, not sent) and the class counts, and downloads
the global model plus, from stage 1 on, the permutation of the layer matched last (a 4-byte
index per neuron); ``oneshot`` uploads the model and the counts, ``naive`` the model; neither
downloads anything (the clients initialise themselves).

Per-client evaluation: ``oneshot`` and ``naive`` score each client's own trained model (the
store table ``fedma_own``, :attr:`personal`); ``layerwise`` the global model.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from simulator.algorithms import register
from simulator.algorithms.base import Algorithm
from simulator.algorithms.exchange import ServerRound, WireInfo
from simulator.algorithms.fedma_layers import (
    Net,
    label_weighted,
    own_init,
    permute_inputs,
    to_global,
    widen,
)
from simulator.algorithms.fedma_match import COSTS, Cost
from simulator.algorithms.fedma_merge import match_into, one_shot, stage_permutations, widths
from simulator.algorithms.params import Param, positive
from simulator.config.fields import ConfigError
from simulator.training.step import Finish, Start

#: store tables: a client's own model, the permutations of its next layers, the round + 1 at
#: which the server wrote them
OWN, PERM, TAG = "fedma_own", "fedma_perm", "fedma_tag"
#: server state: the train mask (sent), the round + 1 whose permutations are current (sent; -1
#: at stage 0), the stage, the global widths
MASK, CURRENT, STAGE, WIDTH = "fedma_mask", "fedma_round", "fedma_stage", "fedma_width"
#: the extra of each client's class counts
COUNTS = "fedma_counts"
MODES = ("layerwise", "oneshot", "naive")
#: the synchronous round policies (every row trained from the round's global model)
SYNCHRONOUS = ("wait_for_all", "deadline", "first_k", "overcommit")


def choice(help: str, default: str, valid: tuple[str, ...]) -> Param:
    """A string parameter among ``valid``."""
    return Param(default, help, lambda v: v in valid, f"one of {list(valid)}", str)


@register
class FedMA(Algorithm):
    name = "fedma"
    params = {
        "mode": choice("layerwise (Alg. 1), oneshot, or naive (FedAvg, own inits)", "layerwise",
                       MODES),
        "cost": choice("matching cost: pfnm (BBP-MAP score) or l2", "pfnm", COSTS),
        "sigma": positive("pfnm: std of a client neuron around its global one", 1.0),
        "sigma0": positive("pfnm: prior std of a global neuron", 1.0),
        "gamma0": positive("pfnm: the Indian buffet process' mass (new neurons)", 1.0),
        "epsilon": Param(0.0, "l2: cost of a new neuron (0: none)", lambda v: v >= 0, ">= 0"),
        "iters": Param(5, "passes of re-matching every client", lambda v: v >= 0, ">= 0", int),
        "growth": Param(1.25, "hidden width cap / --hidden", lambda v: v >= 1, ">= 1"),
    }  # fmt: skip
    reads_rows = True
    rules = ("fedavg",)
    policies = SYNCHRONOUS

    def __init__(self, cfg: Any, **params: Any) -> None:
        super().__init__(cfg, **params)
        if self.p["mode"] != "naive" and cfg.server_lr != 1.0:
            raise ConfigError(
                f"algorithm.server_lr: fedma mode={self.p['mode']} has no server step; "
                f"must be 1, got {cfg.server_lr!r}"
            )

    @property
    def staged(self) -> bool:
        return self.p["mode"] == "layerwise"

    def downloads_model(self) -> bool:
        return self.staged

    @property
    def client_state(self) -> dict[str, Any]:  # type: ignore[override]
        """The own model; in ``layerwise`` mode also the permutations and their round."""
        if not self.staged:
            return {OWN: "params"}
        return {OWN: "params", PERM: lambda lay: sum(Net.of(lay.slices).hidden), TAG: 1}

    @property
    def sends(self) -> tuple[str, ...]:  # type: ignore[override]
        return (MASK, CURRENT) if self.staged else ()

    @property
    def train_mask(self) -> str | None:  # type: ignore[override]
        return MASK if self.staged else None

    @property
    def personal(self) -> str | None:  # type: ignore[override]
        return None if self.staged else OWN

    def cost(self) -> Cost:
        p = self.p
        return Cost(p["cost"], p["sigma"], p["sigma0"], p["gamma0"], p["epsilon"])

    # -- the model ---------------------------------------------------------------------------
    def extend_model(self, model: Any, spec: Any) -> Any:
        """The MLP with its hidden layers ``growth`` times wider (inactive neurons)."""
        return widen(model, self.p["growth"])

    # -- the client side ---------------------------------------------------------------------
    def start_noise_size(self, layout: Any) -> int:
        """One draw per trainable parameter for the own initialisation (not ``layerwise``)."""
        return 0 if self.staged else layout.num_params

    def client_start(self, s: Start) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``oneshot``/``naive``: the client's own initialisation. ``layerwise``: the global
        layers below the stage and, where the client's permutations are current, its own
        layers from the stage up with their inputs in the global order (else the global
        ones)."""
        net = Net.of_parts(s.split(s.flat))
        if not self.staged:  # a client without work keeps the received model (a zero row)
            return torch.where(
                s.mask.sum() > 0, own_init(s.flat, s.noise, s.split, net), s.flat
            ), {}
        fresh = s.state[TAG][0] == s.shared[CURRENT][0]
        own = permute_inputs(s.state[OWN], s.state[PERM], s.split, net)
        upper = torch.where(fresh, own, s.flat)
        return torch.where(s.shared[MASK] > 0, upper, s.flat), {}

    def client_finish(self, f: Finish) -> dict[str, torch.Tensor]:
        """The trained model as the own one (``layerwise``: kept by a client that took no
        step, its start being already permuted), the class counts (not ``naive``), the stored
        permutations unchanged (``layerwise``: the server writes them)."""
        out = {OWN: f.flat}
        if self.staged:
            out = {OWN: torch.where(f.steps > 0, f.flat, f.state[OWN])}
            out |= {PERM: f.state[PERM], TAG: f.state[TAG]}
        if self.p["mode"] != "naive":
            c = list(f.split(f.flat).values())[-1].shape[-1]
            hit = (f.y.unsqueeze(-1) == torch.arange(c, device=f.y.device)) & (
                f.mask.unsqueeze(-1) > 0
            )
            out[COUNTS] = hit.reshape(-1, c).sum(0).to(f.flat.dtype)
        return out

    # -- the server side ---------------------------------------------------------------------
    def init_server(self, global_flat: torch.Tensor, num_params: int) -> dict[str, torch.Tensor]:
        if not self.staged:
            return {}
        return {MASK: torch.ones(num_params), CURRENT: -torch.ones(1), STAGE: torch.zeros(1)}

    def server_update(self, r: ServerRound) -> torch.Tensor:
        """``naive``: FedAvg's step; ``oneshot``: every layer matched; ``layerwise``: the
        stage's layer matched (or the label-weighted classifier)."""
        if self.p["mode"] == "naive":
            return r.global_flat + self.cfg.server_lr * r.delta
        if r.rows is None:
            raise ValueError("algorithm fedma: the server update needs the round's rows")
        kept = np.asarray(r.kept, bool) & (r.rows != 0).any(1).numpy()
        if not kept.any():
            return r.global_flat
        net = Net.of(r.slices)
        g = r.global_flat.double().numpy()
        models = g[None, :] + r.rows[torch.from_numpy(kept)].double().numpy()
        counts = r.extras[COUNTS][torch.from_numpy(kept)].double().numpy()
        w = np.asarray(r.weights, np.float64)[kept]
        w = w / w.sum() if w.sum() > 0 else np.full(len(w), 1.0 / len(w))
        if not self.staged:
            new = one_shot(net, g.copy(), models, counts, self.cost(), self.p["iters"])
        else:
            new = self.stage(r, net, g.copy(), models, w, counts, r.client_ids[kept])
        r.server[WIDTH] = torch.tensor(widths(net, new), dtype=torch.float32)
        return torch.from_numpy(new).float()

    def stage(
        self,
        r: ServerRound,
        net: Net,
        new: np.ndarray,
        models: np.ndarray,
        w: np.ndarray,
        counts: np.ndarray,
        ids: np.ndarray,
    ) -> np.ndarray:
        """Layer-wise: the stage's layer matched (the layers above: the clients' weighted
        average, the next one's inputs in the global order) and each client's permutation
        stored; at the last stage the label-weighted classifier, then a new pass."""
        s, last = int(r.server[STAGE][0]), len(net.layers) - 1
        if s == last:
            head = [net.weight(m, last) for m in models]
            label_weighted(net, new, head, [net.bias(m, last) for m in models], counts)
            r.server[STAGE][0], r.server[CURRENT][0] = 0.0, -1.0
            r.server[MASK][:] = 1.0
            return new
        inputs = [net.weight(m, s) for m in models]
        act, assign = match_into(net, new, models, s, inputs, self.cost(), self.p["iters"])
        cap = net.layers[s][2]
        mixed = models.copy()
        for m, a, sl in zip(mixed, act, assign, strict=True):
            net.weight(m, s + 1)[:] = to_global(net.weight(m, s + 1), a, sl, cap)
        up = net.span(s + 1)
        new[up] = w @ mixed[:, up]
        if r.store is not None:
            r.store.put(PERM, ids, stage_permutations(net, s, act, assign).astype(np.float32))
            r.store.put(TAG, ids, np.full((len(ids), 1), r.round + 1, np.float32))
        r.server[STAGE][0], r.server[CURRENT][0] = s + 1.0, r.round + 1.0
        r.server[MASK][:] = 0.0
        r.server[MASK][up] = 1.0
        return new

    def wire_bytes(self, w: WireInfo) -> tuple[np.ndarray, np.ndarray]:
        """See the module docstring (bytes on the wire)."""
        net, k = Net.of(w.slices), len(w.client_ids)
        classes = net.layers[-1][2]
        if self.p["mode"] == "naive":
            return np.full(k, 4.0 * w.shared_size), np.zeros(k)
        if not self.staged:
            return np.full(k, 4.0 * (w.shared_size + classes)), np.zeros(k)
        if STAGE not in w.server:
            raise ValueError("algorithm fedma: wire_bytes needs the server state (WireInfo.server)")
        s = int(w.server[STAGE][0])
        sl = net.span(s)
        up = 4.0 * (sl.stop - sl.start + classes)
        down = 4.0 * (w.shared_size + (net.hidden[s - 1] if s else 0))
        return np.full(k, up), np.full(k, down)
