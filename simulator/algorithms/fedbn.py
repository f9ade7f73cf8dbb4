"""FedBN (X. Li, M. Jiang, X. Zhang, M. Kamp, Q. Dou, "FedBN: Federated Learning on Non-IID
Features via Local Batch Normalization", ICLR 2021).

Clients train exactly as in FedAvg, but every BatchNorm layer stays on its client: its affine
weight and bias and its running mean and variance are never averaged, defended or recorded on
the ledger. The engine keeps them per client in the client-state store (the protocol's
:meth:`~simulator.algorithms.base.Algorithm.local_parameters`), each client continues from its
own BatchNorm in the next round it is selected, and the per-client evaluation
(``--client-test-fraction`` > 0) scores each client with the shared weights plus its own
BatchNorm, which is the paper's evaluation. The server averages everything else.

BatchNorm entries are found by what the layer holds, not by a name pattern: every module prefix
``m`` of the flat layout with both ``m.running_mean`` and ``m.running_var`` is a BatchNorm
layer (torch's ``_NormBase`` with running statistics), and all its entries (``weight``,
``bias``, ``running_mean``, ``running_var``) stay local. :func:`batchnorm_names` finds the same
entries on a module by type (``isinstance(_BatchNorm)``); the tests check that both agree on
every model of :mod:`simulator.training.models`. A model without BatchNorm (``--norm none``) fails
at
setup with a one-line ConfigError: FedBN would be FedAvg.

Departures from the paper:

* the server aggregate is the round's defended aggregate (sample-weighted for the default
  ``fedavg`` defense); the paper averages the K clients uniformly. With equal-sized clients (the
  paper's and the benchmark's setting) the two coincide;
* ``num_batches_tracked`` is an integer buffer, outside FedSentry's float flat model, so it is
  neither shared nor kept per client; the models use a fixed BatchNorm momentum (0.1), so the
  counter never changes a result;
* the global model's BatchNorm entries stay at their initial values (weight 1, bias 0, mean 0,
  variance 1), so the *global* test accuracy (``final_accuracy``) evaluates the shared weights
  with untrained BatchNorm and is not FedBN's figure of merit: read the per-client accuracies
  (``client_accuracy_mean`` / ``_std`` / ``_worst10``). A client that has never trained is
  evaluated with these initial BatchNorm entries, as the paper's clients start from the same
  initialisation.
"""

from __future__ import annotations

from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from simulator.algorithms import register
from simulator.algorithms.base import Algorithm
from simulator.config.fields import ConfigError

#: the entries of a BatchNorm layer that the flat model can hold (float parameters and buffers)
BN_ENTRIES = ("weight", "bias", "running_mean", "running_var")


def batchnorm_layers(names: list[str]) -> list[str]:
    """Module prefixes of the BatchNorm layers in a flat layout's entry names: those that hold
    both a ``running_mean`` and a ``running_var`` buffer, in layout order."""
    have = set(names)
    out: list[str] = []
    for n in names:
        prefix, _, leaf = n.rpartition(".")
        if leaf == "running_mean" and f"{prefix}.running_var" in have and prefix not in out:
            out.append(prefix)
    return out


def batchnorm_names(model: nn.Module) -> list[str]:
    """Names of every float parameter and buffer of the BatchNorm modules of ``model``, found
    by type (``torch.nn.modules.batchnorm._BatchNorm``), in ``named_parameters`` then
    ``named_buffers`` order (the flat layout's order)."""
    prefixes = {name for name, m in model.named_modules() if isinstance(m, _BatchNorm)}

    def owned(n: str) -> bool:
        return n.rpartition(".")[0] in prefixes

    params = [n for n, _ in model.named_parameters() if owned(n)]
    buffers = [n for n, b in model.named_buffers() if owned(n) and b.is_floating_point()]
    return params + buffers


@register
class FedBN(Algorithm):
    name = "fedbn"

    def local_parameters(self, names: list[str]) -> list[str]:
        """Every entry of every BatchNorm layer in ``names`` (the flat layout's names).

        Raises
        ------
        ConfigError
            When the model has no BatchNorm layer.
        """
        layers = set(batchnorm_layers(names))
        if not layers:
            raise ConfigError(
                "algorithm.algorithm: fedbn keeps BatchNorm layers on the clients "
                "but the model has none; run it with --norm batch"
            )
        return [
            n
            for n in names
            if n.rpartition(".")[0] in layers and n.rpartition(".")[2] in BN_ENTRIES
        ]
