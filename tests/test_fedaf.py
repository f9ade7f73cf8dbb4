"""FedAF: its terms by hand (DM on 2 classes x 1 image, CDC, LGKM's symmetric KL on 2x2
probabilities, the real-sample start, the server's union with labels by position), the server's
training against a plain PyTorch step, the bytes on the wire, the refused parameters. The
trainer paths and engine runs are in ``test_fedaf_run.py``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from simulator.algorithms import ServerRound, WireInfo, make_algorithm
from simulator.algorithms.fedaf import FedAF
from simulator.algorithms.fedaf_losses import (
    cdc_term,
    dm_loss,
    lgkm,
    real_start,
    soft_labels,
    symmetric_kl,
    union,
)
from simulator.config.fields import ConfigError
from simulator.config.learning import AlgorithmConfig
from simulator.training.flat import FlatLayout
from simulator.training.models import ModelSpec
from simulator.training.step import Step


def fedaf(**params: Any) -> FedAF:
    a = make_algorithm(AlgorithmConfig(algorithm="fedaf", algorithm_params=params))
    assert isinstance(a, FedAF)
    return a


# ---------------------------------------------------------------------------- terms by hand


def test_dm_loss_two_classes_one_image_each() -> None:
    """Real embeddings [1, 0], [3, 0] (class 0), [0, 2] (class 1) and a padded row: class
    means [2, 0] and [0, 2], mean squared norm (1 + 9 + 4) / 3 = 14/3. Condensed [1, 1]
    (class 0) and [0, 0] (class 1): squared distances 2 and 4, the loss 6 / (14/3) = 9/7; its
    gradient on the class-0 image is -2([2, 0] - [1, 1]) * 3/14 = [-3/7, 3/7]."""
    real = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0], [100.0, 100.0]])
    y, mask = torch.tensor([0, 0, 1, 1]), torch.tensor([1.0, 1.0, 1.0, 0.0])
    syn = torch.tensor([[1.0, 1.0], [0.0, 0.0]], requires_grad=True)
    loss = dm_loss(real, y, mask, syn, ipc=1)
    assert loss.item() == pytest.approx(9 / 7)
    (g,) = torch.autograd.grad(loss, syn)
    torch.testing.assert_close(g, torch.tensor([[-3.0, 3.0], [0.0, -6.0]]) / 7)
    # a rescaled embedding (x 10, both sides) gives the same loss
    assert dm_loss(10 * real, y, mask, 10 * syn, ipc=1).item() == pytest.approx(9 / 7)
    # a class absent from the batch (here class 1: its row is padding) adds nothing, whatever
    # its condensed image ([5, 5] would add 50); the scale is (1 + 9) / 2 = 5: 2 / 5
    far = torch.tensor([[1.0, 1.0], [5.0, 5.0]])
    only0 = dm_loss(real, y, torch.tensor([1.0, 1.0, 0.0, 0.0]), far, ipc=1)
    assert only0.item() == pytest.approx(0.4)
    # two images of a class: their mean is matched ([1, 1] and [3, -1] average to [2, 0])
    two = torch.tensor([[1.0, 1.0], [3.0, -1.0], [0.0, 2.0], [0.0, 2.0]])
    assert dm_loss(real, y, mask, two, ipc=2).item() == pytest.approx(0.0)


def test_cdc_term_and_its_sliced_wasserstein_reading() -> None:
    """u = [1, 2] (class 0), [3, 0] (class 1); v = [1, 0], [1, 1]: squared distances 4 and 5,
    over C = 2: 4.5; a weight of 0 drops class 1: 2. For C = 2 the mean of (theta . d)^2 over
    the directions 0, 45, 90, 135 degrees is |d|^2 / 2 exactly: the SW_2^2 of point masses."""
    logits = torch.tensor([[1.0, 2.0], [3.0, 0.0]])
    v = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    assert cdc_term(logits, v, torch.ones(2)).item() == pytest.approx(4.5)
    assert cdc_term(logits, v, torch.tensor([1.0, 0.0])).item() == pytest.approx(2.0)
    d = torch.tensor([2.0, -1.0])  # u_1 - v_1
    angles = torch.tensor([0.0, 0.25, 0.5, 0.75]) * math.pi
    theta = torch.stack([angles.cos(), angles.sin()], -1)
    assert ((theta @ d) ** 2).mean().item() == pytest.approx((d**2).sum().item() / 2)
    # two images of class 0 with logits [0, 2] and [2, 2]: their mean [1, 2] is u_0
    four = torch.tensor([[0.0, 2.0], [2.0, 2.0], [3.0, 0.0], [3.0, 0.0]])
    assert cdc_term(four, v, torch.ones(2)).item() == pytest.approx(4.5)


def test_symmetric_kl_on_2x2_probabilities() -> None:
    """R = (0.5, 0.5), T = (0.25, 0.75): 1/2 sum (r - t)(ln r - ln t) = 1/8 ln 3; identical rows
    (0.9, 0.1) give 0."""
    r = torch.tensor([[0.5, 0.5], [0.9, 0.1]]).log()
    t = torch.tensor([[0.25, 0.75], [0.9, 0.1]]).log()
    torch.testing.assert_close(symmetric_kl(r, t), torch.tensor([math.log(3) / 8, 0.0]))


def test_lgkm_soft_labels_from_mean_logits() -> None:
    """Class 0's images have logits [0, ln 3] (T_0 = (1/4, 3/4)) against v_0 = [0, 0]
    (R_0 = (1/2, 1/2)); class 1's equal v_1 = [ln 9, 0]: LGKM = (ln 3 / 8 + 0) / 2. Without
    soft labels for class 1 (``have``) the mean is over class 0 alone; a padded row is skipped."""
    logits = torch.tensor([[0.0, math.log(3)], [math.log(9), 0.0], [50.0, 0.0]])
    y, mask = torch.tensor([0, 1, 0]), torch.tensor([1.0, 1.0, 0.0])
    log_r = F.log_softmax(torch.tensor([[0.0, 0.0], [math.log(9), 0.0]]), -1)
    full = lgkm(logits, y, mask, log_r, torch.ones(2), tau=1.0)
    assert full.item() == pytest.approx(math.log(3) / 16)
    half = lgkm(logits, y, mask, log_r, torch.tensor([1.0, 0.0]), tau=1.0)
    assert half.item() == pytest.approx(math.log(3) / 8)
    # tau = 2 halves the logits: T_0 = softmax([0, ln 3 / 2]) = (t, sqrt(3) t), t = 1 / (1 +
    # sqrt 3), R_0 still (1/2, 1/2): 1/2 sum (r - t)(ln r - ln t) = 1/2 (1/2 - t) ln sqrt 3
    t0 = 1 / (1 + math.sqrt(3))
    want = 0.5 * (0.5 - t0) * math.log(math.sqrt(3))
    assert lgkm(logits, y, mask, log_r, torch.tensor([1.0, 0.0]), 2.0).item() == pytest.approx(want)


def test_soft_labels_are_count_weighted() -> None:
    """Client 0 holds 2 of class 0, client 1 one of each: v_0 = (2 [1, 0] + [4, 3]) / 3 =
    [2, 1], v_1 = client 1's [5, 6]; a class nobody holds is a zero row with flag 0."""
    logits = torch.tensor(
        [
            [[1.0, 0.0, 0.0], [9.0, 9.0, 9.0], [0.0] * 3],
            [[4.0, 3.0, 0.0], [5.0, 6.0, 0.0], [0.0] * 3],
        ]
    )
    counts = torch.tensor([[2.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    v, have = soft_labels(logits, counts)
    torch.testing.assert_close(v, torch.tensor([[2.0, 1.0, 0.0], [5.0, 6.0, 0.0], [0.0] * 3]))
    torch.testing.assert_close(have, torch.tensor([1.0, 1.0, 0.0]))


def test_real_start_takes_each_class_samples_in_epoch_order() -> None:
    """Samples 10, 11, 12 (labels 1, 0, 1) and a padded 13; ipc 2, 3 classes: class 0 has one
    sample (repeated), class 1 two, class 2 none (zeros): [11, 11, 10, 12, 0, 0]. A stored row
    is kept; an all-zero one takes the start."""
    x = torch.tensor([10.0, 11.0, 12.0, 13.0]).reshape(2, 2, 1)
    y, m = torch.tensor([[1, 0], [1, 1]]), torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    want = torch.tensor([11.0, 11.0, 10.0, 12.0, 0.0, 0.0])
    torch.testing.assert_close(real_start(x, y, m, ipc=2, c=3), want)
    a = fedaf(ipc=2)
    torch.testing.assert_close(
        a.trainable_start("syn", torch.zeros(6), torch.zeros(1), (x, y, m)), want
    )
    kept = torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    torch.testing.assert_close(a.trainable_start("syn", kept, torch.zeros(1), (x, y, m)), kept)


def test_union_labels_by_position() -> None:
    """Two rows of C = 2 classes x ipc 2 images of one entry; client 0 holds class 0 only:
    the server trains on client 0's class-0 block and both of client 1's, labels 0 0 0 0 1 1."""
    rows = torch.tensor([[1.0, 2.0, 0.0, 0.0], [5.0, 6.0, 7.0, 8.0]])
    held = torch.tensor([[True, False], [True, True]])
    x, y = union(rows, held, ipc=2, shape=(1,))
    torch.testing.assert_close(x.reshape(-1), torch.tensor([1.0, 2.0, 5.0, 6.0, 7.0, 8.0]))
    assert y.tolist() == [0, 0, 0, 0, 1, 1]


def scaled_forward(
    p: dict[str, torch.Tensor], x: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """A stand-in model: features = logits = each input scaled entry-wise by ``w``."""
    h = x.reshape(len(x), -1) * p["w"]
    return h, h


def test_client_objective_composes_dm_and_cdc() -> None:
    """C = 2, ipc 1, 2-entry inputs. The embedding network (sent, w = [2, 2]) maps the real
    rows [1, 0] (class 0), [0, 1] (class 1) to [2, 0], [0, 2] (mean squared norm 4) and
    S = [1, 1], [0, 0] to [2, 2], [0, 0]: DM = (4 + 4) / 4 = 2. Under v's model (sent,
    w = [1, 1]; the client's own global model is [3, 3], unused) S's class-0 logits are [1, 1]
    against v_0 = [1, 0]: 1 / C = 0.5; class 1's block is all zero (not held): no term (held,
    its [0, 0] against v_1 = [0, 2] would add 2). lambda_loc 1: 2.5; round 0 (no v yet): 2."""
    a = fedaf(ipc=1, lambda_loc=1.0, gamma=0.5)
    g = torch.full((2,), 3.0)
    x, y = torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([0, 1])

    def objective(v: torch.Tensor, have: torch.Tensor) -> float:
        syn = torch.tensor([1.0, 1.0, 0.0, 0.0])
        shared = {"embed": torch.full((2,), 2.0), "v": v, "v_have": have, "v_model": torch.ones(2)}
        feats, logits = scaled_forward({"w": g}, x)
        s = Step(
            {"w": g},
            g,
            x,
            y,
            torch.ones(2),
            feats,
            logits,
            torch.zeros(()),
            g,
            {"w": g},
            {},
            shared,
            scaled_forward,
            {"syn": syn},
        )
        return a.client_loss(s).item()

    assert objective(torch.tensor([[1.0, 0.0], [0.0, 2.0]]), torch.ones(2)) == pytest.approx(2.5)
    assert objective(torch.zeros(0, 0), torch.zeros(0)) == pytest.approx(2.0)


# ----------------------------------------------------------------------------- the server

SPEC = ModelSpec("mlp", (1, 8, 8), 10, hidden=6)


def server_round(a: FedAF, rows: torch.Tensor, extras: dict, kept: list[bool]) -> ServerRound:
    model = SPEC.build(seed=3)
    g = FlatLayout(model).flatten(model)
    return ServerRound(
        0,
        g,
        torch.zeros(rows.shape[1]),
        np.arange(len(kept)),
        np.array(kept),
        np.ones(len(kept)),
        extras,
        a.init_server(g, g.numel()),
        len(kept),
        rows=rows,
        model_spec=SPEC,
        seed=5,
    )


@pytest.mark.parametrize("lambda_glob", [0.0, 2.0])
def test_server_step_is_one_sgd_step_of_ce_on_the_union(lambda_glob: float) -> None:
    """One epoch, one batch (server_batch 6) holding the whole union of 6 images: the new
    global model is one plain SGD step of the mean cross-entropy on the kept rows' held blocks
    (the rejected row and the unheld blocks are not trained on), plus lambda_glob times LGKM
    against the kept clients' count-weighted logits (classes 1, 2, 4); gamma 1: the embedding
    is the new model; v's model is the one the round started from."""
    a = make_algorithm(
        AlgorithmConfig(
            algorithm="fedaf",
            lr=0.5,
            batch_size=2,  # the clients' batch: the server's is server_batch
            algorithm_params={
                "ipc": 2,
                "lambda_glob": lambda_glob,
                "server_epochs": 1,
                "server_batch": 6,
                "gamma": 1.0,
            },
        )
    )
    gen = torch.Generator().manual_seed(0)
    rows = torch.rand(3, 10 * 2 * 64, generator=gen)
    counts = torch.zeros(3, 10)
    counts[0, [1, 4]] = 3.0
    counts[1, 2] = 1.0
    counts[2, 7] = 5.0  # rejected below
    logits = torch.randn(3, 10, 10, generator=gen)
    extras = {"counts": counts, "logits": logits}
    r = server_round(a, rows, extras, [True, True, False])
    r.server["v_model"] = torch.zeros_like(r.global_flat)
    new = a.server_update(r)
    x = torch.cat(
        [rows[0].reshape(10, 2, 64)[[1, 4]].reshape(-1, 64), rows[1].reshape(10, 2, 64)[2]]
    )
    y = torch.tensor([1, 1, 4, 4, 2, 2])
    ref = SPEC.build(seed=3)
    out = ref(x.reshape(-1, 1, 8, 8))
    v, have = soft_labels(logits[:2], counts[:2])  # the rejected client's logits left out
    term = lgkm(out, y, torch.ones(6), F.log_softmax(v, -1), have, tau=1.0)
    assert term.item() > 0.01  # the term moves the step
    (F.cross_entropy(out, y) + lambda_glob * term).backward()
    with torch.no_grad():
        want = torch.cat([(p - 0.5 * p.grad).reshape(-1) for p in ref.parameters()])
    torch.testing.assert_close(new, want, rtol=0, atol=1e-6)
    torch.testing.assert_close(r.server["embed"], new)
    torch.testing.assert_close(r.server["v_have"], (counts[:2].sum(0) > 0).float())
    torch.testing.assert_close(r.server["v_model"], r.global_flat)  # the model v came from


def test_resampling_mixes_a_fresh_init_and_is_seeded() -> None:
    """gamma 0.9: embed - 0.9 w_{t+1} is 0.1 times a fresh init of the model, the same one for
    the same (seed, round) and another for the next seed."""
    a = fedaf(ipc=1, server_epochs=1)
    rows = torch.rand(1, 640)
    extras = {"counts": torch.ones(1, 10), "logits": torch.zeros(1, 10, 10)}
    r1, r2 = server_round(a, rows, extras, [True]), server_round(a, rows, extras, [True])
    n1, n2 = a.server_update(r1), a.server_update(r2)
    torch.testing.assert_close(n1, n2, rtol=0, atol=0)
    fresh = (r1.server["embed"] - 0.9 * n1) / 0.1
    assert not torch.allclose(fresh, n1, atol=1e-3)
    r3 = server_round(a, rows, extras, [True])
    r3.seed = 6
    a.server_update(r3)
    assert not torch.allclose(r3.server["embed"], r1.server["embed"])
    w = r1.model_spec.build(seed=0)
    assert fresh.shape == FlatLayout(w).flatten(w).shape


def test_wire_bytes_by_hand() -> None:
    """ipc 10, 8x8 inputs, 10 classes: a row of 6400 entries, 640 a class. A client holding
    3 classes uploads 4 (3 (640 + 10) + 10) = 7840 bytes; one holding 10: 26040. Both download
    4 (2 P + 100 + 10) (the global model and v's), 4 (P + 110) without CDC."""
    a = fedaf()
    layout = FlatLayout(SPEC.build(seed=0))
    assert a.row_entries(layout) == 6400
    counts = np.zeros((2, 10), np.int64)
    counts[0, [0, 3, 9]] = [5, 1, 2]
    counts[1] = 4
    w = WireInfo(np.array([4, 7]), layout.size, 10, lambda: counts, layout.slices, row_size=6400)
    up, down = a.wire_bytes(w)
    np.testing.assert_array_equal(up, [7840.0, 26040.0])
    np.testing.assert_array_equal(down, [4.0 * (2 * layout.size + 110)] * 2)
    _, alone = fedaf(lambda_loc=0.0).wire_bytes(w)
    np.testing.assert_array_equal(alone, [4.0 * (layout.size + 110)] * 2)


def test_parameters_and_batch_norm_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"fedaf gamma=1.5 invalid; must be float in \[0, 1\]"):
        fedaf(gamma=1.5)
    with pytest.raises(
        ConfigError, match=r"algorithm 'fedaf': unknown parameter 'ipcs'; valid: \['gamma',"
    ):
        fedaf(ipcs=3)
    with pytest.raises(ConfigError, match="^model.norm: fedaf embeds real batches"):
        ModelSpec("mlp", (1, 8, 8), 10, hidden=6, norm="batch", extension=fedaf()).build(0)
