"""FedAF's terms as pure tensor functions (not an algorithm: nothing is registered here;
:mod:`simulator.algorithms.fedaf` uses them).

A condensed set S_k holds ``ipc`` images of each of the C classes, class-major: image ``i`` of a
flattened set has label ``i // ipc`` ("labels by position"). Client-side functions are written
for ONE client and are vmap-safe: class selections are one-hot products, never Python branches
on data; the padding of a partial last batch (``mask`` 0) counts for nothing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from simulator.training.step import PlainStep, Step


def class_sums(
    values: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, num_classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(means [C, H], counts [C])``: the mean of ``values`` ``[N, H]`` over the real rows of
    each class (a zero row for a class with no real row) and the real rows per class."""
    onehot = F.one_hot(y, num_classes).to(values.dtype) * mask.to(values.dtype)[:, None]
    counts = onehot.sum(0)
    return (onehot.T @ values) / counts.clamp_min(1.0)[:, None], counts


def dm_loss(
    real: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, syn: torch.Tensor, ipc: int
) -> torch.Tensor:
    """Distribution matching (Zhao & Bilen, WACV 2023, Eq. 4): ``sum_c ||mean_c(real) -
    mean_c(syn)||^2`` over the classes with a real row in the batch, divided by the mean
    ``||real||^2`` of the batch's real rows (detached: the loss, and so the step on the images,
    does not change when the embedding is rescaled); ``real`` ``[B, H]`` are the batch's
    embeddings, ``syn`` ``[C * ipc, H]`` the condensed set's (class-major)."""
    c = syn.shape[0] // ipc
    mean_real, counts = class_sums(real, y, mask, c)
    mean_syn = syn.reshape(c, ipc, -1).mean(1)
    present = (counts > 0).to(real.dtype)
    scale = ((real.detach() ** 2).sum(-1) * mask).sum() / mask.sum().clamp_min(1.0)
    return (present * ((mean_real - mean_syn) ** 2).sum(-1)).sum() / scale.clamp_min(1e-12)


def cdc_term(syn_logits: torch.Tensor, v: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Collaborative data condensation: ``sum_c weight_c ||u_c - v_c||^2 / C``, u_c the mean
    logits of the condensed images of class c (``syn_logits`` ``[C * ipc, C]``, class-major), v_c
    the global class-wise mean logits of real data ``[C, C]``. ``||u - v||^2 / C`` is the
    squared sliced 2-Wasserstein distance between the point masses at u and v (the mean over
    unit directions theta of ``(theta . (u - v))^2``), computed exactly rather than by random
    projections."""
    c = v.shape[0]
    u = syn_logits.reshape(c, -1, syn_logits.shape[-1]).mean(1)
    return (weight * ((u - v) ** 2).sum(-1)).sum() / c


def symmetric_kl(log_r: torch.Tensor, log_t: torch.Tensor) -> torch.Tensor:
    """``1/2 (KL(R || T) + KL(T || R))`` per row of two ``[..., C]`` log-distributions."""
    r, t = log_r.exp(), log_t.exp()
    return 0.5 * ((r * (log_r - log_t)).sum(-1) + (t * (log_t - log_r)).sum(-1))


def lgkm(
    logits: torch.Tensor,
    y: torch.Tensor,
    mask: torch.Tensor,
    log_r: torch.Tensor,
    have: torch.Tensor,
    tau: float,
) -> torch.Tensor:
    """Local-global knowledge matching on one batch of condensed images: the mean over the
    classes c present in the batch and in ``have`` of ``symmetric_kl(R_c, T_c)``, with
    ``R_c = softmax(v_c / tau)`` (``log_r`` ``[C, C]``, from the clients' real data) and
    ``T_c = softmax(mean of the model's logits on the batch's class-c images / tau)``."""
    c = log_r.shape[0]
    mean_logits, counts = class_sums(logits, y, mask, c)
    w = (counts > 0).to(logits.dtype) * have
    per_class = symmetric_kl(log_r, F.log_softmax(mean_logits / tau, dim=-1))
    return (w * per_class).sum() / w.sum().clamp_min(1.0)


def real_start(
    x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, ipc: int, c: int
) -> torch.Tensor:
    """``[C * ipc * D]``: ``ipc`` of the client's own samples of each class, in the order of its
    (seeded) first epoch, the k-th slot of class c taking its ``k mod n_c``-th sample (a class
    with n_c < ipc samples repeats them; a class it lacks stays zero). ``x`` ``[S, B, ...]``,
    ``y``, ``mask`` ``[S, B]``: the client's batches of one epoch, each sample marked once."""
    xf = x.reshape(-1, x[0, 0].numel())
    onehot = F.one_hot(y.reshape(-1), c).to(xf.dtype) * mask.reshape(-1, 1).to(xf.dtype)
    rank = torch.cumsum(onehot, 0) * onehot  # 1-based rank of each sample within its class
    count = onehot.sum(0)
    slot = torch.arange(ipc, device=xf.device, dtype=xf.dtype)
    want = torch.remainder(slot[None, :], count.clamp_min(1.0)[:, None]) + 1.0  # [C, ipc]
    pick = (rank.T[:, None, :] == want[:, :, None]).to(xf.dtype)  # [C, ipc, N]
    return (pick.reshape(c * ipc, -1) @ xf).reshape(-1)


def soft_labels(logits: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(v [C, C], have [C])``: the clients' class-wise mean logits of real data averaged with
    their class counts (``logits`` ``[K, C, C]``, ``counts`` ``[K, C]``), and which classes any
    of them holds (1.0) or none (0.0, a zero row)."""
    total = counts.sum(0)
    v = (counts[:, :, None] * logits).sum(0) / total.clamp_min(1.0)[:, None]
    return v, (total > 0).to(logits.dtype)


def union(
    rows: torch.Tensor, held: torch.Tensor, ipc: int, shape: tuple[int, ...]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The server's training set from K condensed sets: ``rows`` ``[K, C * ipc * D]``,
    ``held`` ``[K, C]`` bools (the classes each client holds); returns the images of the held
    classes ``[n, *shape]`` and their labels by position ``[n]`` (the block of a class a client
    does not hold is not sent and not trained on)."""
    k, c = held.shape
    images = rows.reshape(k, c, ipc, *shape)[held]
    labels = torch.arange(c).expand(k, c)[held].repeat_interleave(ipc)
    return images.reshape(-1, *shape), labels


def split_as(params: dict[str, torch.Tensor], flat: torch.Tensor) -> dict[str, torch.Tensor]:
    """A ``[P]`` vector cut into tensors shaped like ``params`` (same names, same order)."""
    parts = torch.split(flat, [t.numel() for t in params.values()])
    return {n: p.reshape(t.shape) for (n, t), p in zip(params.items(), parts, strict=True)}


class ServerObjective(PlainStep):
    """The server's objective on a batch of condensed images: ``CE + lambda_glob * LGKM``
    (the soft labels' log-probabilities ``log_r`` and ``have`` come as sent tensors)."""

    def __init__(self, lambda_glob: float, tau: float) -> None:
        self.lambda_glob, self.tau = lambda_glob, tau

    def client_loss(self, s: Step) -> torch.Tensor:
        if self.lambda_glob == 0:
            return s.ce
        term = lgkm(s.logits, s.y, s.mask, s.shared["log_r"], s.shared["have"], self.tau)
        return s.ce + self.lambda_glob * term
