"""SCAFFOLD (Karimireddy et al., "SCAFFOLD: Stochastic Controlled Averaging for Federated
Learning", ICML 2020), Algorithm 1 with option II.

The server keeps the control variate c and sends it every round; client i keeps c_i (zero before
its first round, in the client-state store). Each local step uses the corrected gradient
g_i(y) - c_i + c, written here as the loss term <c - c_i, y> whose gradient is exactly that
correction. After K local steps with learning rate eta_l:

    c_i+ = c_i - c + (x - y_i) / (K eta_l)        (option II),

and the client returns its update y_i - x with the extra Delta c_i = c_i+ - c_i. The server steps
x <- x + eta_g * (defended aggregate) and c <- c + (1/N) sum_{i kept} Delta c_i with N the
population size.

Departures: the aggregate of the model updates is the round's defended aggregate (sample-weighted
for FedAvg, the paper averages uniformly); Delta c of rows the defense rejected is not added (a
rejected client must not move c); only trainable parameters carry control variates (buffers are
averaged as in FedAvg); K counts the steps actually taken (partial work); with momentum or weight
decay option II is the usual approximation.

Bytes on the wire (:meth:`Scaffold.wire_bytes`, float32): with S the shared model's entries and T
its trainable parameters (c's entries; T = S without BatchNorm), each client downloads the model
and c, ``4 * (S + T)``, and uploads its update and Delta c, ``4 * (S + T)``. A ``--compression``
mask compresses the model part only; c and Delta c travel dense (the mask never touches them), so
they count whole in both the compressed and the uncompressed figures.
"""

from __future__ import annotations

import numpy as np
import torch

from simulator.algorithms import register
from simulator.algorithms.base import Algorithm
from simulator.algorithms.exchange import ServerRound, WireInfo
from simulator.training.step import Finish, Step


@register
class Scaffold(Algorithm):
    name = "scaffold"
    client_state = {"c": "params"}
    sends = ("c",)

    def client_loss(self, s: Step) -> torch.Tensor:
        return s.ce + ((s.shared["c"] - s.state["c"]) * s.flat).sum()

    def client_finish(self, f: Finish) -> dict[str, torch.Tensor]:
        k = f.steps.clamp_min(1.0)
        c_new = f.state["c"] - f.shared["c"] + (f.global_flat - f.flat) / (k * f.lr)
        c_new = torch.where(f.steps > 0, c_new, f.state["c"])
        return {"c": c_new, "delta_c": c_new - f.state["c"]}

    def init_server(self, global_flat: torch.Tensor, num_params: int) -> dict[str, torch.Tensor]:
        return {"c": torch.zeros(num_params, dtype=torch.float32)}

    def server_update(self, r: ServerRound) -> torch.Tensor:
        kept = torch.from_numpy(r.kept.astype(bool))
        # a replay of recorded rounds (the ledger's committee, the audit) has no extras: the
        # model step it checks does not depend on c
        if bool(kept.any()) and "delta_c" in r.extras:
            dc = r.extras["delta_c"][kept].double().sum(0) / r.num_clients
            r.server["c"] = (r.server["c"].double() + dc).float()
        return r.global_flat + self.cfg.server_lr * r.delta

    def wire_bytes(self, w: WireInfo) -> tuple[np.ndarray, np.ndarray]:
        """Down: the model and c; up: the update and Delta c (c and Delta c: the trainable
        parameters' entries, left dense by any mask)."""
        n = np.full(len(w.client_ids), 4.0 * (w.shared_size + w.trainable_entries()))
        return n, n.copy()
