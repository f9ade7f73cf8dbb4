"""What the server evaluates: the test set, public/root-set scores of candidate models, a
client's holdout (Siren's alarm), the server's own root-set update (FLTrust) and backdoor
success. All of it runs in the driver on the federation's model template."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from simulator.rng import client_seeds
from simulator.run.federation import Federation
from simulator.training.flat import evaluate, score_models
from simulator.training.groups import group_of, offsets, table_name
from simulator.training.spec import LocalSpec
from simulator.training.stacked import train_clients

if TYPE_CHECKING:
    from simulator.config.sections import Config
    from simulator.state.store import ClientStore
    from simulator.training.space import ParamSpace


class ServerEval:
    """Evaluation helpers bound to one federation."""

    def __init__(self, fed: Federation, seed: int, local_epochs: int, spec: LocalSpec) -> None:
        self.fed, self.seed, self.local_epochs, self.spec = fed, seed, local_epochs, spec

    def first(self, flat: torch.Tensor) -> torch.Tensor:
        """The first model group's part of a global state (the whole state with one group):
        with several groups the global test figures are group 0's model's."""
        return flat if self.fed.num_groups == 1 else flat[: self.fed.layout.size]

    def test(self, flat: torch.Tensor) -> tuple[float, float]:
        """Accuracy and loss on the test set (with model groups: group 0's global model)."""
        f = self.fed
        return evaluate(f.model, f.layout, self.first(flat), f.test_x, f.test_y)

    def score_models(self, models: torch.Tensor) -> dict[str, np.ndarray]:
        """Accuracy, loss and mean softmax entropy of each model row on the public set."""
        f = self.fed
        return score_models(f.model, f.layout, models, f.public_x, f.public_y)

    def accuracy_on(self, flat: torch.Tensor, x: np.ndarray, y: np.ndarray) -> float:
        """Accuracy of a model on some samples (a client's holdout)."""
        f = self.fed
        return evaluate(f.model, f.layout, flat, torch.from_numpy(x), torch.from_numpy(y))[0]

    @torch.no_grad()
    def correct_on(
        self, flat: torch.Tensor, x: np.ndarray, y: np.ndarray, batch: int = 2048
    ) -> np.ndarray:
        """Which samples a model classifies correctly (``[n]`` bools; Siren's paired alarm
        test on a client's holdout)."""
        f = self.fed
        f.layout.load(f.model, flat)
        f.model.eval()
        xt, yt = torch.from_numpy(x), torch.from_numpy(y)
        out = [
            (f.model(xt[i : i + batch]).argmax(1) == yt[i : i + batch]).numpy()
            for i in range(0, len(yt), batch)
        ]
        return np.concatenate(out) if out else np.zeros(0, bool)

    def server_update(self, rnd: int, global_flat: torch.Tensor) -> torch.Tensor:
        """The global model trained on the public set (one client's worth of local work) by
        plain SGD on the cross-entropy: the server is not a client of the algorithm (it has no
        client state, and FLTrust's root update is ERM)."""
        f = self.fed
        seed = int(client_seeds(self.seed, rnd, np.array([2**31 - 1]))[0])
        out = train_clients(
            f.model,
            f.layout,
            global_flat,
            f.public_x,
            f.public_y,
            [np.arange(len(f.public_y))],
            [self.local_epochs],
            [seed],
            dataclasses.replace(self.spec, step=None),
        )
        return out.updates[0]

    @torch.no_grad()
    def attack_success_rate(self, global_flat: torch.Tensor, trigger: Any) -> float | None:
        """Backdoor success: share of non-target test samples classified as the target once
        the trigger is stamped on them (None without a backdoor)."""
        if trigger is None:
            return None
        from attacks.backdoor import attack_success_rate

        f = self.fed
        f.layout.load(f.model, self.first(global_flat))
        f.model.eval()
        pred = f.model(trigger.stamp(f.test_x)).argmax(1)
        return attack_success_rate(pred, f.test_y, trigger.target)


def summarize(acc: np.ndarray) -> dict[str, Any]:
    """Mean, standard deviation and worst-10% mean (the lowest ceil(n / 10)) of the clients'
    accuracies, and how many clients were evaluated."""
    worst = np.sort(acc)[: max(1, -(-len(acc) // 10))]
    return {
        "client_accuracy_mean": float(acc.mean()),
        "client_accuracy_std": float(acc.std()),
        "client_accuracy_worst10": float(worst.mean()),
        "clients_evaluated": len(acc),
    }


#: the "round" of the fine-tuning seeds of the per-client evaluation: past any real round
FINETUNE_ROUND = 2**40


class ClientEval:
    """Per-client evaluation on local test splits (``--client-test-fraction``).

    A fixed seeded sample of ``min(N, eval_clients)`` clients is evaluated at every evaluation
    round, each with the global model (its kept-local entries, if the algorithm has any, from
    the client-state store; clients that never trained use the global ones), or with its
    personal model where the algorithm keeps one (Ditto: ``Algorithm.personal``). With
    ``--client-finetune-epochs N`` that model is first fine-tuned on the client's training data
    for N epochs (plain SGD on the cross-entropy with the client optimizer and batch size, the
    batches shuffled by a seed of the experiment seed and the client id: the same at every
    evaluation; the run's state is untouched): "FedAvg + fine-tuning". Reports the mean,
    the standard deviation and the worst-10% mean (the lowest ceil(n / 10) accuracies) of the
    clients' accuracies. Cost: the sample's test rows (and, fine-tuning, its training rows),
    never the population. With several model groups (``spaces``: each group's entries) each
    client is scored with its group's model (no fine-tuning).
    """

    def __init__(
        self,
        fed: Federation,
        clients: np.ndarray,
        space: ParamSpace,
        store: ClientStore,
        algorithm: Any = None,
        finetune: tuple[int, LocalSpec, int] | None = None,
        spaces: tuple[ParamSpace, ...] = (),
    ) -> None:
        self.fed, self.clients, self.space, self.store = fed, clients, space, store
        self.spaces = spaces
        #: evaluates each client with its personal model (the algorithm's ``personal`` table)
        self.algorithm = algorithm if getattr(algorithm, "personal", None) is not None else None
        data = fed.arrays(fed.local_test, clients, fed.local_test_pool) if len(clients) else []
        keep = [i for i, (_, y) in enumerate(data) if len(y)]
        self.clients = clients[keep]
        data = [data[i] for i in keep]
        self.counts = np.array([len(y) for _, y in data], np.int64)
        self.x = torch.from_numpy(np.concatenate([x for x, _ in data])) if data else None
        self.y = torch.from_numpy(np.concatenate([y for _, y in data])) if data else None
        #: (epochs, plain client spec, experiment seed) of the fine-tuning, or None
        self.finetune = finetune if finetune is not None and finetune[0] > 0 else None

    @classmethod
    def of(
        cls,
        cfg: Config,
        fed: Federation,
        space: ParamSpace,
        store: ClientStore,
        algorithm: Any = None,
        spaces: tuple[ParamSpace, ...] = (),
    ) -> ClientEval:
        n = min(fed.num_clients, cfg.experiment.eval_clients)
        a = cfg.algorithm
        spec = LocalSpec(a.lr, a.batch_size, a.weight_decay, momentum=a.momentum)
        tune = (cfg.experiment.client_finetune_epochs, spec, cfg.experiment.seed)
        if fed.local_test is None or n == 0:
            return cls(fed, np.zeros(0, np.int64), space, store, algorithm, tune, spaces)
        rng = np.random.default_rng([cfg.experiment.seed, 0xE7A1])
        ids = (
            np.arange(n)
            if n == fed.num_clients
            else np.sort(rng.choice(fed.num_clients, n, replace=False))
        )
        return cls(fed, ids.astype(np.int64), space, store, algorithm, tune, spaces)

    @torch.no_grad()
    def models(self, global_flat: torch.Tensor) -> torch.Tensor | None:
        """``[n, size]`` the model each evaluated client is scored with, or None where that is
        the global model for all of them."""
        if self.algorithm is not None:
            rows, _ = self.store.get(self.algorithm.personal, self.clients)
            return torch.stack(
                [self.algorithm.personal_model(global_flat, torch.from_numpy(r)) for r in rows]
            )
        if self.space.local is None:
            return None
        local, present = self.store.get("local", self.clients)
        flats = global_flat.expand(len(self.clients), -1).clone()
        at = torch.from_numpy(self.space.local)
        for i in np.flatnonzero(present):
            flats[i, at] = torch.from_numpy(local[i])
        return flats

    def tuned(self, global_flat: torch.Tensor, flats: torch.Tensor | None) -> torch.Tensor:
        """The clients' models after the fine-tuning epochs on their training data, in chunks
        of 64 clients (vectorized)."""
        epochs, spec, seed = self.finetune  # type: ignore[misc]
        f, out = self.fed, []
        for lo in range(0, len(self.clients), 64):
            ids = self.clients[lo : lo + 64]
            data = f.arrays(f.clients, ids)
            sizes = [len(y) for _, y in data]
            ends = np.cumsum(sizes)
            res = train_clients(
                f.model,
                f.layout,
                global_flat,
                torch.from_numpy(np.concatenate([x for x, _ in data])),
                torch.from_numpy(np.concatenate([y for _, y in data])),
                [np.arange(e - n, e) for n, e in zip(sizes, ends, strict=True)],
                [epochs] * len(ids),
                client_seeds(seed, FINETUNE_ROUND, ids).tolist(),
                spec,
                starts={} if flats is None else dict(enumerate(flats[lo : lo + 64])),
            )
            out.append(global_flat + res.updates)
        return torch.cat(out)

    @torch.no_grad()
    def evaluate(self, global_flat: torch.Tensor) -> dict[str, Any]:
        """``client_accuracy_{mean,std,worst10}`` and ``clients_evaluated`` ({} if disabled)."""
        if self.x is None:
            return {}
        f = self.fed
        if len(self.spaces) > 1:
            return summarize(self.grouped(global_flat))
        flats = self.models(global_flat)
        if self.finetune is not None:
            with torch.enable_grad():
                flats = self.tuned(global_flat, flats)
        if flats is None:
            f.layout.load(f.model, global_flat)
            f.model.eval()
            hit = (f.model(self.x).argmax(1) == self.y).double().numpy()
            starts = np.concatenate([[0], np.cumsum(self.counts)[:-1]])
            acc = np.add.reduceat(hit, starts) / self.counts
        else:
            acc = np.empty(len(self.clients))
            off = 0
            for i, n in enumerate(self.counts.tolist()):
                acc[i] = evaluate(
                    f.model, f.layout, flats[i], self.x[off : off + n], self.y[off : off + n]
                )[0]
                off += n
        return summarize(acc)

    def grouped(self, global_flat: torch.Tensor) -> np.ndarray:
        """Each client's accuracy with its model group's model: the group's global model with
        the client's kept-local entries from the group's ``local`` table (if it has any)."""
        f, n_groups = self.fed, len(self.spaces)
        offs = offsets(f.groups)
        grp = group_of(self.clients, n_groups)
        local: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for g, sp in enumerate(self.spaces):
            if sp.local is not None and (grp == g).any():
                local[g] = self.store.get(table_name("local", g), self.clients[grp == g])
        at = np.zeros(n_groups, np.int64)  # each client's row in its group's fetch
        acc = np.empty(len(self.clients))
        off = 0
        for i, n in enumerate(self.counts.tolist()):
            g = int(grp[i])
            mg, flat = f.groups[g], global_flat[offs[g] : offs[g + 1]].clone()
            if g in local and local[g][1][at[g]]:
                flat[torch.from_numpy(self.spaces[g].local)] = torch.from_numpy(local[g][0][at[g]])
            at[g] += 1
            xs, ys = self.x[off : off + n], self.y[off : off + n]
            acc[i] = evaluate(mg.model, mg.layout, flat, xs, ys)[0]
            off += n
        return acc
