"""FedFA's feature-statistics augmentation (FFA) layer, where it goes in a model, and the
server's Student-t modulation (Zhou & Konukoglu, "FedFA: Federated Feature Augmentation",
ICLR 2023, Eq. 2-9 and Algorithm 2). The algorithm itself is :mod:`simulator.algorithms.fedfa`.

The layer reads one client's noise draws of the current local step from
:data:`simulator.training.models.STEP_NOISE` and the server's gammas from
:data:`simulator.training.models.STEP_SHARED`; outside training (evaluation, the client's finish,
the
server) both are None and the layer is the identity. Noise layout of one step (``K`` FFA layers,
``C_k`` channels, batch ``B``): the ``K`` activation coins first, then per layer ``B * C_k``
draws for ``eps_mu`` and, for a conv stage, ``B * C_k`` for ``eps_sigma``. A coin ``z`` fires
its layer when the uniform ``Phi(z) = 0.5 * (1 + erf(z / sqrt(2)))`` is below ``p``, computed as
``z < Phi^-1(p)`` (the same event; ``-inf`` for p = 0, ``+inf`` for p = 1).

Gradients flow through the per-sample statistics ``mu``, ``sigma`` (Eq. 8-9, the
reparameterisation) but not through the sampling ranges ``S`` (Eq. 3 and 7), which are treated
as constants of the step. The paper does not say; its public code lets them through. Lemma 1
reads FFA as the noise injection ``X + e``, and the gradient path through ``S`` is ``eps``
times a derivative, zero in expectation over ``eps``. Cutting it removes about a third of the
layer's backward, which keeps FedFA's vectorized throughput within the protocol's 0.7x of
FedAvg's.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import torch
from torch import nn

from simulator.training.models import BATCH_MASK, STEP_NOISE, STEP_SHARED

#: numerical floor inside the square roots (the paper writes none; the public code uses 1e-6)
EPS = 1e-6
VARIANTS = ("full", "R", "C")


class FFALayer(nn.Module):
    """Feature-statistics augmentation of one stage's output: ``[B, C, H, W]`` (``spatial``)
    or the ``[B, C]`` units of a hidden block.

    In training, with probability ``p`` per step (the step's coin), each sample's channel mean
    ``mu`` and std ``sigma`` (Eq. 2) are resampled as ``mu + eps_mu * S_mu`` and
    ``sigma + eps_sigma * S_sigma`` (Eq. 9) and the feature is re-styled with them (Eq. 8). The
    ranges: ``S^2 = (gamma + 1) * var_B`` (variant ``full``, Eq. 7, ``var_B`` the batch
    variance of the statistic over the real rows, Eq. 3), ``S^2 = var_B`` (``C``), or
    ``S = lam`` for every channel (``R``). When it fires it also updates the momentum
    statistics (Eq. 4) with the batch means over the real rows: the buffer ``ffa_stats``
    ``[2, C]``, row 0 ``mubar`` (starts at 0), row 1 ``sigmabar`` (starts at 1).

    A hidden unit (not ``spatial``) is its own mean and has a zero spread (``sigma`` is the
    floor ``sqrt(eps)``), so Eq. 8 reduces exactly to ``mu^ = x + eps_mu * S_mu``; that path
    computes just this and draws no ``eps_sigma``.

    Parameters
    ----------
    channels : C, the stage's channels (or hidden units).
    index : this layer's position among the model's ``num_layers`` FFA layers (its coin).
    num_layers : K, the FFA layers of the model.
    before : channels of the FFA layers before this one (its slice of the gammas).
    noise_before : per-sample draws of the FFA layers before this one (its noise offset).
    p, alpha, variant, lam : activation probability, momentum, ``full`` / ``R`` / ``C`` and
        FedFA-R's fixed std.
    spatial : a conv stage's ``[B, C, H, W]`` output (else ``[B, C]``).
    eps : floor added under the square roots.
    """

    def __init__(
        self,
        channels: int,
        index: int,
        num_layers: int,
        before: int,
        noise_before: int,
        p: float,
        alpha: float,
        variant: str = "full",
        lam: float = 0.5,
        spatial: bool = True,
        eps: float = EPS,
    ) -> None:
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"FFA variant: unknown {variant!r}; valid: {list(VARIANTS)}")
        self.channels, self.index, self.num_layers = channels, index, num_layers
        self.before, self.noise_before, self.spatial = before, noise_before, spatial
        self.p, self.alpha, self.variant, self.lam, self.eps = p, alpha, variant, lam, eps
        self.register_buffer(
            "ffa_stats", torch.stack([torch.zeros(channels), torch.ones(channels)])
        )
        self.threshold = -math.inf if p <= 0 else math.inf if p >= 1 else NormalDist().inv_cdf(p)

    @property
    def draws(self) -> int:
        """Normals per sample: eps_mu and eps_sigma per channel (one per unit if not spatial)."""
        return self.channels * (2 if self.spatial else 1)

    def extra_repr(self) -> str:
        return f"{self.channels}, p={self.p}, alpha={self.alpha}, variant={self.variant}"

    def _gamma(self, key: str, like: torch.Tensor) -> torch.Tensor:
        """This layer's slice of the server's gamma vector (ones before the server has any)."""
        g = (STEP_SHARED.get() or {}).get(key)
        lo, hi = self.before, self.before + self.channels
        if g is None or g.numel() < hi:
            return torch.ones_like(like)
        return g.reshape(-1)[lo:hi].to(like.dtype)

    @staticmethod
    def _batch_mean(
        stat: torch.Tensor, w: torch.Tensor | None, n: torch.Tensor | None
    ) -> torch.Tensor:
        """Mean over the batch's real rows (all rows when no mask is set)."""
        return stat.mean(0) if w is None else (stat * w).sum(0) / n

    def _range(
        self,
        stat: torch.Tensor,
        mean: torch.Tensor,
        w: torch.Tensor | None,
        n: torch.Tensor | None,
        key: str,
    ) -> torch.Tensor:
        """``S`` of one statistic ``[B, C]``: Eq. 3 (1/n over the real rows) and Eq. 7, or
        FedFA-R's constant; a constant of the step for autograd (see the module docstring)."""
        if self.variant == "R":
            return torch.full_like(mean, self.lam)
        with torch.no_grad():
            var = self._batch_mean((stat - mean) ** 2, w, n)
            if self.variant == "full":
                var = (self._gamma(key, var) + 1) * var
            return (var + self.eps).sqrt()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        nz = STEP_NOISE.get()
        if not self.training or nz is None:
            return x
        b, c = x.shape[0], x.shape[1]
        if not self.spatial and x.dim() != 2:
            raise ValueError(f"FFA layer: expected [B, {c}] hidden units, got {tuple(x.shape)}")
        m = BATCH_MASK.get()
        w = None if m is None else m.to(x.dtype).unsqueeze(-1)  # [B, 1]
        n = None if w is None else w.sum().clamp_min(1.0)
        at = self.num_layers + b * self.noise_before
        e_mu = nz[at : at + b * c].reshape(b, c)
        fire = nz[self.index] < self.threshold  # the coin: Phi(z) < p
        f = fire.to(x.dtype)
        if self.spatial:
            flat = x.reshape(b, c, -1)
            mu = flat.mean(-1)  # [B, C] Eq. 2
            # (not Tensor.var: it has no batching rule, vmap would loop over the clients)
            sigma = (((flat - mu.unsqueeze(-1)) ** 2).mean(-1) + self.eps).sqrt()
            mean_mu, mean_sigma = self._batch_mean(mu, w, n), self._batch_mean(sigma, w, n)
            e_sigma = nz[at + b * c : at + 2 * b * c].reshape(b, c)
            mu_hat = torch.addcmul(mu, e_mu, self._range(mu, mean_mu, w, n, "gamma_mu"))
            sigma_hat = torch.addcmul(
                sigma,
                e_sigma,  # Eq. 9
                self._range(sigma, mean_sigma, w, n, "gamma_sigma"),
            )
            shape = (b, c) + (1,) * (x.dim() - 2)
            out = torch.where(
                fire,
                (x - mu.reshape(shape)) / sigma.reshape(shape) * sigma_hat.reshape(shape)
                + mu_hat.reshape(shape),
                x,
            )  # Eq. 8
        else:
            mean_mu = self._batch_mean(x, w, n)
            # Eq. 8-9 with x = mu, sigma -> 0: x + eps_mu * S_mu; eps zeroed when idle, so an
            # idle layer returns x exactly (and needs no torch.where)
            out = torch.addcmul(x, e_mu, f * self._range(x, mean_mu, w, n, "gamma_mu"))
            mean_sigma = torch.full_like(mean_mu, math.sqrt(self.eps))
        with torch.no_grad():  # Eq. 4
            # buf + (1 - alpha) (mean - buf) when the layer fires, buf + 0 otherwise
            stats = torch.stack([mean_mu, mean_sigma])
            self.ffa_stats.add_(((1.0 - self.alpha) * f) * (stats - self.ffa_stats))
        return out


def ffa_layers(model: nn.Module) -> list[FFALayer]:
    """The model's FFA layers in module (= flat layout) order."""
    return [m for m in model.modules() if isinstance(m, FFALayer)]


def ffa_sites(body: nn.Module) -> list[tuple[int, int]]:
    """``(index, channels)`` of the body layers that close a stage of the feature extractor
    before the representation: in a convolutional body each conv stage (Conv2d ... ReLU, and
    its MaxPool2d when one follows), not the Linear that makes the representation (the paper's
    AlexNet has FFA after its conv stages, none after its FC layers); in a body of hidden
    blocks (Linear ... ReLU, the MLP) every block but the last, which makes the
    representation."""
    if not isinstance(body, nn.Sequential):
        return []
    layers = list(body)
    opener = nn.Conv2d if any(isinstance(m, nn.Conv2d) for m in layers) else nn.Linear
    sites, pending = [], None
    for i, layer in enumerate(layers):
        if isinstance(layer, opener):
            pending = layer.out_channels if isinstance(layer, nn.Conv2d) else layer.out_features
        nxt = layers[i + 1] if i + 1 < len(layers) else None
        closes = isinstance(layer, nn.MaxPool2d) or (
            isinstance(layer, nn.ReLU) and not isinstance(nxt, nn.MaxPool2d)
        )
        if pending is not None and closes:
            sites.append((i, int(pending)))
            pending = None
    return sites if opener is nn.Conv2d else sites[:-1]


def insert_ffa(model: nn.Module, p: float, alpha: float, variant: str, lam: float) -> nn.Module:
    """``model`` with an FFA layer after each stage of ``model.body`` (:func:`ffa_sites`).

    The closing layer (a parameter-free ReLU or MaxPool2d) at body index ``i`` becomes
    ``Sequential(layer, FFALayer)``, so every parameter keeps its name; no random numbers are
    drawn, so the initial weights equal the unextended model's. ValueError if the body has no
    stage (the logistic regression).
    """
    sites = ffa_sites(model.body)
    if not sites:
        raise ValueError(
            "fedfa: the model has no conv stage or hidden block for an FFA layer "
            "(use --model mlp or cnn)"
        )
    spatial = any(isinstance(m, nn.Conv2d) for m in model.body)
    before = noise_before = 0
    for k, (i, c) in enumerate(sites):
        layer = FFALayer(c, k, len(sites), before, noise_before, p, alpha, variant, lam, spatial)
        model.body[i] = nn.Sequential(model.body[i], layer)
        before, noise_before = before + c, noise_before + layer.draws
    return model


def noise_per_step(model: nn.Module, batch_size: int) -> int:
    """Standard normals one client's step needs: ``K`` coins, then ``B`` times each layer's
    per-sample draws (``2 C_k`` for a conv stage, ``C_k`` for a hidden block)."""
    layers = ffa_layers(model)
    return len(layers) + batch_size * sum(m.draws for m in layers)


def student_t_gamma(stats: torch.Tensor) -> torch.Tensor:
    """Eq. 5-6 for one layer: ``stats`` ``[M, C]`` momentum statistics of M clients ->
    ``[C]`` gammas ``C * t_j / sum_c t_c`` with ``t = (1 + 1 / var_M)^-1 = var_M / (1 +
    var_M)``, ``var_M`` the (biased, 1/M) variance over clients per channel. All-zero
    variances (one client, identical clients) give gamma = 1 everywhere (no channel favoured).
    """
    s = stats.double()
    var = ((s - s.mean(0)) ** 2).mean(0)
    t = var / (1.0 + var)
    total = t.sum()
    c = s.shape[1]
    g = torch.where(total > 0, c * t / torch.where(total > 0, total, 1.0), torch.ones_like(t))
    return g.float()


def layer_gammas(stats: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """:func:`student_t_gamma` of each layer's columns of ``stats`` ``[M, sum(sizes)]``,
    concatenated (the normalisation to mean 1 is per layer)."""
    if stats.shape[1] != sum(sizes):
        raise ValueError(
            f"fedfa: statistics have {stats.shape[1]} channels, the FFA layers {sum(sizes)}"
        )
    parts = torch.split(stats, sizes, dim=1)
    return torch.cat([student_t_gamma(p) for p in parts]) if sizes else torch.zeros(0)
