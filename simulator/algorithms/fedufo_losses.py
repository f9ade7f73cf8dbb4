"""FedUFO's loss terms and server-side helpers as pure tensor functions (not an algorithm: no
:func:`~simulator.algorithms.register` here; :mod:`simulator.algorithms.fedufo` uses them).

Every client-side function is written for ONE client and is vmap-safe; per-row terms are
averaged over the real rows of the batch (``mask``), so the padding of a partial last batch
counts for nothing. Equation numbers are those of Zhang et al., "Federated Learning for Non-IID
Data via Unified Feature Learning and Optimization Objective Alignment" (ICCV 2021).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

#: names of the discriminator's parameters in the flat model (``extend_model`` adds ``disc``)
DISC = ("disc.0.weight", "disc.0.bias", "disc.2.weight", "disc.2.bias")


def masked_mean(per_row: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``per_row`` ``[B]`` over the real rows (``mask`` 1), 0 for an all-padding batch."""
    return (per_row * mask).sum() / mask.sum().clamp_min(1.0)


def split_as(params: dict[str, torch.Tensor], flat: torch.Tensor) -> dict[str, torch.Tensor]:
    """``flat`` ``[..., P]`` cut into tensors shaped like ``params`` (same names, same order),
    keeping the leading dimensions: the peers' models as parameter dicts."""
    out, at, lead = {}, 0, flat.shape[:-1]
    for name, v in params.items():
        n = v.numel()
        out[name] = flat[..., at : at + n].reshape(*lead, *v.shape)
        at += n
    return out


def in_play(peer_labels: torch.Tensor) -> torch.Tensor:
    """``[K_d + 1]``: 1 at the outputs of D labelled this round (the peers' client ids and the
    last output, "this client"), 0 elsewhere."""
    mark = peer_labels.sum(0)
    own = F.one_hot(torch.tensor(mark.shape[-1] - 1), mark.shape[-1]).to(mark.device, mark.dtype)
    return (mark + own).clamp(max=1.0)


def discriminate(
    d: dict[str, torch.Tensor], feats: torch.Tensor, play: torch.Tensor
) -> torch.Tensor:
    """Log-probabilities of the discriminator D (Linear, ReLU, Linear; Sec. 4.1.1) on
    ``feats`` ``[..., H]`` -> ``[..., K_d + 1]``, the softmax taken over the outputs in
    ``play`` only (the others get about -1e4)."""
    h = F.relu(F.linear(feats, d[DISC[0]], d[DISC[1]]))
    logits = F.linear(h, d[DISC[2]], d[DISC[3]]) - (1.0 - play) * 1e4
    return F.log_softmax(logits, dim=-1)


def uniform_loss(
    d: dict[str, torch.Tensor], feats: torch.Tensor, play: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """UAD loss (Eq. 4): ``-(1/K) sum_j log D(f)_j``, the cross-entropy of D's output on the
    features to the uniform distribution over the K outputs in ``play``. D enters detached:
    only the feature extractor learns from it."""
    fixed = {k: v.detach() for k, v in d.items()}
    logp = discriminate(fixed, feats, play)
    return masked_mean(-(logp * play).sum(-1) / play.sum().clamp_min(1.0), mask)


def discriminator_loss(
    d: dict[str, torch.Tensor],
    own: torch.Tensor,
    peer_feats: torch.Tensor,
    peer_labels: torch.Tensor,
    play: torch.Tensor,
    mask: torch.Tensor,
) -> torch.Tensor:
    """D's classification loss (Eq. 5) on detached features: the client's posterior features
    ``own`` ``[B, H]`` labelled with the last output ("this client") and each of the M peer
    models' features of the same rows ``peer_feats`` ``[M, B, H]`` labelled ``peer_labels``
    ``[M, K_d + 1]`` (one-hot); the M + 1 cross-entropies are averaged with equal weights."""
    own_term = -discriminate(d, own.detach(), play)[..., -1]
    logp = discriminate(d, peer_feats.detach(), play)  # [M, B, K_d + 1]
    peer_term = -(logp * peer_labels[:, None, :]).sum(-1).sum(0)  # [B]
    return masked_mean((own_term + peer_term) / (peer_feats.shape[0] + 1), mask)


def class_shares(counts: torch.Tensor) -> torch.Tensor:
    """p_j of Eq. 7: ``counts`` ``[M, C]`` (samples of each class per group member) divided by
    the group's total of that class; a class nobody in the group holds gets 0 everywhere."""
    total = counts.sum(0, keepdim=True)
    return torch.where(total > 0, counts / total.clamp_min(1e-12), torch.zeros_like(counts))


def cgr_target(peer_probs: torch.Tensor, shares: torch.Tensor, reading: str) -> torch.Tensor:
    """The group consensus target of Eq. 7 from the peers' predictions ``[M, B, C]`` and their
    class shares ``[M, C]``: ``z = sum_j p_j * y_j`` (element-wise), then

    * ``"softmax"`` (Eq. 7 as printed): ``Softmax(z)``, a flat target (entries in [0, 1], so the
      largest ratio between two classes is e);
    * ``"mean"``: ``z / sum_c z_c``, the class-share weighted average of the peers'
      predictions renormalized (what Eq. 7 reads as without its extra softmax).
    """
    z = (shares[:, None, :] * peer_probs).sum(0)  # [B, C]
    if reading == "softmax":
        return torch.softmax(z, dim=-1)
    return z / z.sum(-1, keepdim=True).clamp_min(1e-12)


def kl_to(target: torch.Tensor, logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``KL(target || softmax(logits))`` per row, averaged over the real rows (the direction of
    PyTorch's ``KLDivLoss(log_softmax(logits), target)``, the usual distillation loss); rows of
    the target with zero entries contribute nothing there."""
    t = target.detach()
    logt = torch.where(t > 0, torch.log(t.clamp_min(1e-30)), torch.zeros_like(t))
    return masked_mean((t * (logt - F.log_softmax(logits, dim=-1))).sum(-1), mask)


def pick_lowest(
    candidates: np.ndarray, perf: np.ndarray, m: int, rng: np.random.Generator
) -> np.ndarray:
    """Dynamic sampling (Sec. 3.3.2): the ``m // 2`` candidates with the lowest known local
    performance (``perf[j]`` is candidate ``j``'s, NaN = never measured; ties by id), plus
    ``m - m // 2`` others drawn uniformly from the remaining candidates."""
    known = candidates[~np.isnan(perf)]
    low = known[np.argsort(perf[~np.isnan(perf)], kind="stable")][: m // 2]
    rest = np.setdiff1d(candidates, low)
    more = rng.choice(rest, size=min(m - len(low), len(rest)), replace=False)
    return np.sort(np.concatenate([low, more]).astype(np.int64))
