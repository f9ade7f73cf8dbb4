"""FedFA (T. Zhou and E. Konukoglu, "FedFA: Federated Feature Augmentation", ICLR 2023), with
the paper's FedFA-R and FedFA-C ablations (``--algorithm-param variant=full|R|C``).

Clients train as in FedAvg with a feature-statistics augmentation (FFA) layer after each stage
of the feature extractor (:mod:`simulator.algorithms.fedfa_layer`): with probability ``p`` per
local step a layer re-styles each sample's features with channel statistics drawn around its
own, ``mu^ = mu + eps * S_mu``, ``sigma^ = sigma + eps * S_sigma`` (Eq. 8-9), where the ranges
fuse the client's batch variance of the statistics with the server's gammas,
``S^2 = (gamma + 1) * var_B`` (Eq. 7). When a layer fires it also updates its momentum
statistics ``mubar, sigmabar`` (Eq. 4, momentum ``alpha``). After local training each client
sends its momentum statistics as extras (``ffa_mu``, ``ffa_sigma``, all layers concatenated);
the server takes their variance across the round's clients per channel (Eq. 5), turns it into
per-layer gammas with a one-degree-of-freedom Student-t kernel normalised to mean 1 (Eq. 6) and
sends them (``gamma_mu``, ``gamma_sigma``) with the next model. At test time there is no
augmentation (the layer is the identity in eval mode and outside training). The weights are
aggregated exactly as FedAvg's.

Variants: ``full`` (the paper), ``C`` (FedFA-C: client-specific variances only,
``S^2 = var_B``), ``R`` (FedFA-R: the same fixed std ``lam`` = 0.5 for every channel and both
statistics). Defaults p = 0.5, alpha = 0.99 (Algorithm 2).

Choices where the seeds are silent or disagree (the paper is followed, not the public code):

* per-channel shared variances (Eq. 5) and gammas (Eq. 6); the public code computes one scalar
  variance over all clients and channels, which makes every gamma 1;
* the momentum statistics restart from (0, 1) every round (Algorithm 1, line 3) and are never
  averaged into the model; the public code averages them with the weights and never resets;
* the momentum update happens only when the layer fires (Algorithm 2, lines 1 and 11-12);
* biased (1/B, 1/M) variances as in Eq. 3 and 5 (the code uses unbiased ``torch.var``), and a
  1e-6 floor under every square root (the code's eps) so a zero variance stays differentiable;
* the noise ``eps_mu``, ``eps_sigma`` is drawn per sample and channel (Eq. 9 leaves the shape
  open; per sample as the public code); coins and eps come from the client's own seeded stream
  (:meth:`noise_size`), so the vectorized and sequential trainers see the same draws;
* before the server has any statistics (round 0) every gamma is 1, i.e. ``S^2 = 2 var_B``
  (equal variances in Eq. 6); a round whose rows were all rejected leaves the gammas as they
  were, and only the clients the defense kept enter Eq. 5 (uniform 1/M, as the paper);
* gradients flow through each sample's statistics (the reparameterisation of Eq. 9) but not
  through the sampling ranges ``S`` (treated as constants of the step; the public code lets
  them through): that path is ``eps`` times a derivative, zero in expectation over ``eps``
  (Lemma 1 reads FFA as noise injection), and cutting it keeps the vectorized throughput
  within 0.7x of FedAvg's;
* placement: after every conv stage of ``--model cnn`` (after its max-pool when there is one;
  the representation layer, a Linear, gets none, as the paper's AlexNet FC layers); for
  ``--model mlp``, which has no conv stage, after every hidden block (Linear, [BN], ReLU) but
  the last, which makes the representation (the analogue of the CNN's Linear), i.e. after the
  first of its two. There a feature has ``H = W = 1``: its sigma is 0 (the 1e-6 floor), so FFA
  reduces exactly to additive noise ``eps_mu * S_mu`` scaled by the batch spread of each unit
  (no ``eps_sigma`` is drawn). ``--model logreg`` has no stage and is refused.

The momentum statistics are buffers of the flat model (like BatchNorm's running statistics;
one ``ffa_stats`` ``[2, C]`` per layer), updated in the training forward over the real rows of
the batch only. They therefore sit in each client's update row (so defenses and the ledger see
them, a few entries per channel); the server discards their aggregate and writes (0, 1) back
into the next global model, which is how every client starts each round from (0, 1). The
gammas are computed from the extras, not the rows.

The padded rows of a client's partial last batch stay out of the FFA statistics: the trainer
publishes the batch mask (:data:`simulator.training.models.BATCH_MASK`) whenever the model has
BatchNorm
or the algorithm draws noise.
"""

from __future__ import annotations

from typing import Any

import torch

from simulator.algorithms import register
from simulator.algorithms.base import Algorithm
from simulator.algorithms.exchange import ServerRound
from simulator.algorithms.fedfa_layer import VARIANTS, insert_ffa, layer_gammas, noise_per_step
from simulator.algorithms.params import Param, positive
from simulator.config.fields import ConfigError
from simulator.training.step import Finish

#: extras and server tensors: momentum statistics up, gammas down
STATS = ("ffa_mu", "ffa_sigma")
GAMMAS = ("gamma_mu", "gamma_sigma")
#: the FFA layers' buffer: [2, C], row 0 mubar, row 1 sigmabar
BUFFER = "ffa_stats"


def _stat_names(names: list[str] | Any) -> list[str]:
    """The FFA statistics buffers among flat-layout or buffer names, in order."""
    return [n for n in names if n.rpartition(".")[2] == BUFFER]


@register
class FedFA(Algorithm):
    name = "fedfa"
    params = {
        "p": Param(
            0.5,
            "probability that an FFA layer is active in a local step",
            lambda v: 0 <= v <= 1,
            "in [0, 1]",
        ),
        "alpha": Param(
            0.99,
            "momentum of the FFA layers' running feature statistics",
            lambda v: 0 <= v < 1,
            "in [0, 1)",
        ),
        "variant": Param(
            "full",
            "full (FedFA), R (FedFA-R: fixed std lam) or C (FedFA-C: "
            "client-specific variances only)",
            lambda v: v in VARIANTS,
            f"one of {list(VARIANTS)}",
            str,
        ),
        "lam": positive("FedFA-R's std of the sampled statistics, every channel", 0.5),
    }
    sends = GAMMAS

    # -- the model ---------------------------------------------------------------------------
    def extend_model(self, model: Any, spec: Any) -> Any:
        """An FFA layer after each conv stage (cnn) or hidden block (mlp)."""
        try:
            return insert_ffa(model, self.p["p"], self.p["alpha"], self.p["variant"], self.p["lam"])
        except ValueError as e:
            raise ConfigError(f"algorithm.algorithm: {e}") from None

    def noise_size(self, model: Any, batch_size: int) -> int:
        return noise_per_step(model, batch_size)

    # -- the client side ---------------------------------------------------------------------
    def client_finish(self, f: Finish) -> dict[str, torch.Tensor]:
        """The momentum statistics of every FFA layer after training (the extras)."""
        bufs = [f.buffers[n] for n in _stat_names(f.buffers)]
        if not bufs:
            return {}
        return {leaf: torch.cat([b[row] for b in bufs]) for row, leaf in enumerate(STATS)}

    # -- the server side ---------------------------------------------------------------------
    def init_server(self, global_flat: torch.Tensor, num_params: int) -> dict[str, torch.Tensor]:
        """No statistics yet: empty gammas, which the layers read as all ones."""
        return {g: torch.zeros(0) for g in GAMMAS}

    def server_update(self, r: ServerRound) -> torch.Tensor:
        """FedAvg's step; the FFA statistics of the next model back to (0, 1); Eq. 5-6 on the
        kept clients' statistics."""
        nxt = r.global_flat + self.cfg.server_lr * r.delta
        names = _stat_names(r.slices)
        sizes = [(r.slices[n].stop - r.slices[n].start) // 2 for n in names]
        for n, c in zip(names, sizes, strict=True):
            nxt[r.slices[n]] = torch.cat([torch.zeros(c), torch.ones(c)])
        kept = torch.from_numpy(r.kept.astype(bool))
        # a replay of recorded rounds (ledger committee, audit) has no extras: the model step
        # it checks does not depend on the gammas; a ServerRound without the layout's slices
        # names no layers
        if bool(kept.any()) and sizes and all(s in r.extras for s in STATS):
            for leaf, gamma in zip(STATS, GAMMAS, strict=True):
                r.server[gamma] = layer_gammas(r.extras[leaf][kept].float(), sizes)
        return nxt
