"""FedMA's server side on the clients' models (numpy, float64): one hidden layer matched into
the global model (:func:`match_into`), the one-shot merge of every layer (:func:`one_shot`),
and the permutation rows a layer-wise stage stores per client (:func:`stage_permutations`).

``models`` are the clients' whole flat models ``[J, P]`` (global + row), ``new`` the global
model being written (changed in place), ``net`` the :class:`~simulator.algorithms.fedma_layers.
Net` of the layout.
"""

from __future__ import annotations

import numpy as np

from simulator.algorithms.fedma_layers import Net, active_rows, label_weighted, to_global
from simulator.algorithms.fedma_match import Cost, inverse_permutation, match_layer


def match_into(
    net: Net,
    new: np.ndarray,
    models: np.ndarray,
    n: int,
    inputs: list[np.ndarray],
    cost: Cost,
    iters: int,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Match hidden layer ``n`` (each client's weight with its inputs in the global order:
    ``inputs[j]``) into ``new`` (the matched neurons at the first slots, the rest zero);
    returns each client's active neurons and their global slots."""
    act = [active_rows(net.weight(m, n), net.bias(m, n), net.weight(m, n + 1)) for m in models]
    vecs = [
        np.hstack([x[a], net.bias(m, n)[a, None]])
        for x, a, m in zip(inputs, act, models, strict=True)
    ]
    assign, layer = match_layer(vecs, cost, net.layers[n][2], iters)
    w, b = net.weight(new, n), net.bias(new, n)
    w[:], b[:] = 0.0, 0.0
    w[: len(layer)], b[: len(layer)] = layer[:, :-1], layer[:, -1]
    return act, assign


def one_shot(
    net: Net, new: np.ndarray, models: np.ndarray, counts: np.ndarray, cost: Cost, iters: int
) -> np.ndarray:
    """Every hidden layer matched bottom up (each next layer's inputs put in the global order
    of the layer below), then the label-weighted classifier (class ``counts`` ``[J, C]``)."""
    inputs = [net.weight(m, 0) for m in models]
    for n in range(len(net.hidden)):
        act, assign = match_into(net, new, models, n, inputs, cost, iters)
        inputs = [
            to_global(net.weight(m, n + 1), a, s, net.layers[n][2])
            for m, a, s in zip(models, act, assign, strict=True)
        ]
    head = len(net.layers) - 1
    label_weighted(net, new, inputs, [net.bias(m, head) for m in models], counts)
    return new


def stage_permutations(
    net: Net, s: int, act: list[np.ndarray], assign: list[np.ndarray]
) -> np.ndarray:
    """``[J, sum(hidden)]`` each client's permutation row after matching hidden layer ``s``:
    identity blocks, and in layer ``s``'s block the client slot each global slot takes
    (:func:`~simulator.algorithms.fedma_match.inverse_permutation`)."""
    perm = np.concatenate([np.arange(c, dtype=np.float64) for c in net.hidden])
    perms = np.repeat(perm[None, :], len(act), axis=0)
    at, cap = sum(net.hidden[:s]), net.layers[s][2]
    for i, (a, sl) in enumerate(zip(act, assign, strict=True)):
        perms[i, at : at + cap] = inverse_permutation(a, sl, cap)
    return perms


def widths(net: Net, flat: np.ndarray) -> list[int]:
    """The active neurons of each hidden layer of ``flat``."""
    return [
        len(active_rows(net.weight(flat, n), net.bias(flat, n), net.weight(flat, n + 1)))
        for n in range(len(net.hidden))
    ]
