"""FedDyn (Acar et al., "Federated Learning Based on Dynamic Regularization", ICLR 2021), as in
the lab deck's Algorithm 1.

Client k keeps g_k = grad L_k(theta_k^{t-1}) (zero before its first round, in the client-state
store) and minimizes

    L_k(theta) - <g_k, theta> + (alpha / 2) ||theta - theta^{t-1}||^2,

then sets g_k <- g_k - alpha (theta_k^t - theta^{t-1}). The server keeps h and, with m the
population size,

    h^t = h^{t-1} - (alpha / m) sum_{k in P_t} (theta_k^t - theta^{t-1}),
    theta^t = mean_{k in P_t} theta_k^t - h^t / alpha.

Departures: (1) the deck writes the h update as ``sum theta_k - theta^{t-1}``; the paper (and this
code) subtracts theta^{t-1} inside the sum. (2) The mean over P_t is the round's *defended*
aggregate (sample-weighted for FedAvg; robust rules replace it), and the sum over P_t is the
number of kept rows times that aggregate, exact for uniform weights; ``server_lr`` scales the
averaging step (1 = the paper). (3) Only trainable parameters are regularized; normalization
buffers are averaged as in FedAvg. (4) A round in which no update is kept leaves the model and h
unchanged. (5) The paper's clients use plain SGD; momentum/weight decay apply if configured.
"""

from __future__ import annotations

import torch

from simulator.algorithms import register
from simulator.algorithms.base import Algorithm
from simulator.algorithms.exchange import ServerRound
from simulator.algorithms.params import positive
from simulator.training.step import Finish, Step


@register
class FedDyn(Algorithm):
    name = "feddyn"
    params = {"alpha": positive("dynamic regularization coefficient alpha", 0.01)}
    client_state = {"grad": "params"}

    def client_loss(self, s: Step) -> torch.Tensor:
        a = self.p["alpha"]
        return (
            s.ce
            - (s.state["grad"] * s.flat).sum()
            + 0.5 * a * ((s.flat - s.global_flat) ** 2).sum()
        )

    def client_finish(self, f: Finish) -> dict[str, torch.Tensor]:
        return {"grad": f.state["grad"] - self.p["alpha"] * (f.flat - f.global_flat)}

    def init_server(self, global_flat: torch.Tensor, num_params: int) -> dict[str, torch.Tensor]:
        return {"h": torch.zeros(num_params, dtype=torch.float32)}

    def server_update(self, r: ServerRound) -> torch.Tensor:
        kept = int(r.kept.sum())
        if kept == 0:
            return r.global_flat.clone()
        a = self.p["alpha"]
        p = r.server["h"].numel()
        h = r.server["h"] - a * (kept / r.num_clients) * r.delta[:p]
        r.server["h"] = h
        new = r.global_flat + self.cfg.server_lr * r.delta
        new[:p] -= h / a
        return new
