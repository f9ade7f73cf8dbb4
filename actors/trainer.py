"""What a device actor hosts: the code that trains a batch of clients on demand.

:class:`ClientTrainer` is a plain class. The Ray pool wraps it as an actor (``ray.remote``); the
in-process executor uses it directly, so tests exercise the same code without Ray. It receives the
training set once (a Ray object-store reference, read zero-copy) and the population's client data
source (:class:`simulator.data.clients.ClientData`), which rebuilds a selected client's rows from
its id, so nothing per client travels before the client is selected and any worker can train any
client (needed when an actor dies and its clients move).

A round sends each worker a :class:`TrainRequest`: its clients (id, epochs, seed, poisoned), the
rows of their client state, the start models of clients that do not start from the global model,
and which of their updates to add into one weighted partial sum (a linear aggregation rule)
instead of returning them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from actors.client_inputs import ClientTransform, client_arrays
from actors.merge import weighted_sum
from actors.request import TrainRequest
from defenses.base import finite_rows
from simulator.data.clients import ClientData
from simulator.training.flat import FlatLayout
from simulator.training.groups import group_of, split_by_group
from simulator.training.models import ModelSpec
from simulator.training.spec import LocalSpec, TrainOutput
from simulator.training.stacked import train_clients


def _concat(outs: list[TrainOutput]) -> TrainOutput:
    """One output of consecutive chunks' outputs, in chunk order (their updates, whose widths
    differ between model groups, are read per chunk: left empty here)."""
    return TrainOutput(
        torch.zeros(0),
        np.concatenate([o.losses for o in outs]),
        np.concatenate([o.steps for o in outs]),
        {k: torch.cat([o.outputs[k] for o in outs]) for k in outs[0].outputs},
    )


def _cat_local(parts: list[torch.Tensor | None]) -> torch.Tensor | None:
    """The chunks' kept-local entries, in chunk order (None when the model keeps none)."""
    return None if parts[0] is None else torch.cat(parts)  # type: ignore[arg-type]


class ClientTrainer:
    """Trains batches of clients; clients of different model groups never share a chunk.

    Parameters
    ----------
    model_spec : architecture of every client, or one per model group (client k is in group
        k mod G; the global state holds the groups' flat models end to end).
    x_train, y_train : the training set (numpy), or empty arrays for generated client data.
    clients : the population's client data source.
    transform : per-client input transform (feature shift), or None.
    threads : torch intra-op threads (1 per CPU actor; None keeps the process setting).
    device : ``"cpu"`` or ``"cuda"``.
    """

    def __init__(
        self,
        model_spec: ModelSpec | Sequence[ModelSpec],
        x_train: np.ndarray,
        y_train: np.ndarray,
        clients: ClientData,
        transform: ClientTransform | None = None,
        threads: int | None = 1,
        device: str = "cpu",
    ) -> None:
        if threads:
            torch.set_num_threads(threads)
        self.device = torch.device(device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(  # (torch's own: "Torch not compiled with CUDA enabled")
                f"a GPU actor found no CUDA in torch {torch.__version__} on its node (a CPU "
                "build, or no driver): install a CUDA build there, or run CPU actors "
                "(--gpus-per-actor 0)"
            )
        specs = [model_spec] if isinstance(model_spec, ModelSpec) else list(model_spec)
        self.models = [s.build(seed=0).to(self.device) for s in specs]
        self.layouts = [FlatLayout(m) for m in self.models]
        self.model, self.layout = self.models[0], self.layouts[0]
        self.offsets = np.concatenate([[0], np.cumsum([la.size for la in self.layouts])])
        self.x_np, self.y_np = np.asarray(x_train), np.asarray(y_train)
        self.x = torch.as_tensor(self.x_np).to(self.device)
        self.y = torch.as_tensor(self.y_np).to(self.device)
        self.clients, self.transform = clients, transform
        self.spec: LocalSpec | None = None
        self.vectorize = True
        self.shared_index: list[torch.Tensor | None] = [None] * len(specs)
        self.local_index: list[torch.Tensor | None] = [None] * len(specs)

    def configure(
        self,
        spec: LocalSpec,
        vectorize: bool = True,
        shared_index: np.ndarray | Sequence[np.ndarray | None] | None = None,
        local_index: np.ndarray | Sequence[np.ndarray | None] | None = None,
    ) -> None:
        """Keep the round-invariant settings (sent once, not every round): the client optimizer
        and algorithm step, and which flat entries are shared (rows) or kept on clients (one
        index array, or with several model groups one per group)."""
        self.spec, self.vectorize = spec, vectorize
        self.shared_index = self._per_group(shared_index)
        self.local_index = self._per_group(local_index)

    def _per_group(
        self, index: np.ndarray | Sequence[np.ndarray | None] | None
    ) -> list[torch.Tensor | None]:
        n = len(self.models)
        per = [index] * n if n == 1 or index is None else list(index)
        if len(per) != n:
            raise ValueError(f"ClientTrainer.configure: {len(per)} index arrays for {n} groups")
        return [None if i is None else torch.as_tensor(i, device=self.device) for i in per]

    def _group(self, ids: np.ndarray) -> int:
        """The model group of a chunk's clients (ValueError if they are of several)."""
        if len(self.models) == 1 or not len(ids):
            return 0
        groups = np.unique(group_of(ids, len(self.models)))
        if len(groups) > 1:
            raise ValueError(f"TrainRequest: a chunk mixes model groups {groups.tolist()}")
        return int(groups[0])

    def _chunk(
        self,
        g: torch.Tensor,
        req: TrainRequest,
        lo: int,
        hi: int,
        shared: dict[str, np.ndarray] | None,
    ) -> tuple[TrainOutput, np.ndarray, int]:
        """Train tasks ``lo:hi`` of ``req`` as one stacked computation from their group's
        global model (``g``: the whole global state); also their sample counts and group."""
        tasks = req.tasks[lo:hi]
        ids = np.array([t.client_id for t in tasks], dtype=np.int64)
        grp = self._group(ids)
        px, py, idx = client_arrays(self.clients, ids, self.x_np, self.y_np, self.transform)
        x = self.x if px is None else torch.as_tensor(px).to(self.device)
        y = self.y if py is None else torch.as_tensor(py).to(self.device)
        out = train_clients(
            self.models[grp],
            self.layouts[grp],
            self._global(g, grp),
            x,
            y,
            idx,
            [t.epochs for t in tasks],
            # a lone client trains ~4x faster unmapped (vmap's per-call cost; FedAsync's
            # one-client steps); the server's own root-set update keeps the mapped path
            [t.seed for t in tasks],
            self.spec,
            vectorize=self.vectorize and len(tasks) > 1,
            poisoned=[t.poisoned for t in tasks],
            starts={
                i: self._tensor(req.starts[t.client_id])
                for i, t in enumerate(tasks)
                if t.client_id in req.starts
            },
            state={k: self._tensor(v[lo:hi]) for k, v in req.state.items()},
            shared={k: self._tensor(v) for k, v in (shared or {}).items()},
        )
        return out, np.array([len(i) for i in idx], dtype=np.int64), grp

    def _global(self, g: torch.Tensor, grp: int) -> torch.Tensor:
        """Group ``grp``'s global model: its slice of the global state."""
        if len(self.models) == 1:
            return g
        return g[int(self.offsets[grp]) : int(self.offsets[grp + 1])]

    def _tensor(self, a: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.asarray(a), dtype=torch.float32).to(self.device)

    def _rows(
        self, out: TrainOutput, grp: int, g: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A chunk's rows (its shared update entries, or the output the algorithm sends
        instead, popped from ``out.outputs``) and its kept-local entries after training (None
        without any; with several groups padded with zeros to the widest group's)."""
        upd, shared, local = out.updates, self.shared_index[grp], self.local_index[grp]
        upload = getattr(self.spec.step, "upload", "update")
        if upload != "update":  # the algorithm sends one of its outputs instead of its update
            sent = out.outputs.pop(upload)
            rows = sent.reshape(len(upd), -1).to(torch.float32)
        else:
            rows = upd if shared is None else upd[:, shared]
        if local is None:
            return rows, None
        kept = upd[:, local] + self._global(g, grp)[local]
        width = max((len(i) for i in self.local_index if i is not None), default=0)
        if kept.shape[1] < width:
            kept = torch.nn.functional.pad(kept, (0, width - kept.shape[1]))
        return rows, kept

    def train(
        self,
        global_flat: np.ndarray,
        req: TrainRequest,
        shared: dict[str, np.ndarray] | None = None,
    ) -> dict[str, Any]:
        """Train ``req``'s clients from ``global_flat``; per-client results in task order."""
        if self.spec is None:
            raise RuntimeError("ClientTrainer.configure must be called before train")
        t0 = time.perf_counter()
        tasks = req.tasks
        sizes = req.chunks if req.chunks is not None else [len(tasks)]
        if req.chunks is not None and (sum(sizes) != len(tasks) or min(sizes, default=1) < 1):
            raise ValueError(f"TrainRequest.chunks: sizes {sizes} do not split {len(tasks)} tasks")
        if len(self.models) > 1:  # a stacked chunk trains one model: never two groups
            ids = np.array([t.client_id for t in tasks], dtype=np.int64)
            order, sizes = split_by_group(ids, sizes, len(self.models))
            req = req.subset(order.tolist())
            tasks = req.tasks
        ids = np.array([t.client_id for t in tasks], dtype=np.int64)
        g = self._tensor(global_flat)
        parts, timings, at = [], [], 0
        for n in sizes:
            c0 = time.perf_counter()
            out, counts, grp = self._chunk(g, req, at, at + n, shared)
            parts.append((out, counts, *self._rows(out, grp, g)))
            timings.append(
                {
                    "clients": n,
                    "max_steps": int(out.steps.max(initial=0)),
                    "steps": int(out.steps.sum()),
                    "samples": int(counts.sum()),
                    "start": c0 - t0,
                    "end": time.perf_counter() - t0,
                }
            )
            at += n
        out = parts[0][0] if len(parts) == 1 else _concat([p[0] for p in parts])
        sample_counts = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
        rows = parts[0][2] if len(parts) == 1 else torch.cat([p[2] for p in parts])
        local = parts[0][3] if len(parts) == 1 else _cat_local([p[3] for p in parts])
        finite = finite_rows(rows)
        summed = (
            torch.zeros(len(tasks), dtype=torch.bool, device=self.device)
            if req.summed is None
            else torch.as_tensor(req.summed, device=self.device)
        )
        add = summed & finite
        psum, pweight = None, 0.0
        if bool(add.any()):
            # summed in float64 (the same model whatever the number of actors); non-finite
            # rows are zeroed so that they cannot poison the sum (their verdict says so)
            w = torch.as_tensor(req.weights, dtype=torch.float64, device=self.device)
            mat = rows if bool(add.all()) else torch.where(add[:, None], rows, 0.0)
            psum = weighted_sum(mat, w * add)
            pweight = float((torch.as_tensor(req.weights, dtype=torch.float64) * add.cpu()).sum())
        ret = ~summed
        if bool(ret.all()):
            returned = rows.cpu().numpy()
        else:
            returned = rows[ret].cpu().numpy() if bool(ret.any()) else None
        meta = np.stack(
            [
                ids.astype(np.float64),
                out.losses.astype(np.float64),
                out.steps,
                sample_counts,
                finite.cpu().numpy(),
                ret.cpu().numpy(),
            ],
            axis=1,
        ).astype(np.float64)
        # a compact answer (few objects to pickle): per-client numbers in one array
        res: dict[str, Any] = {
            "meta": meta,
            "rows": returned,
            "sum": psum,
            "sum_weight": pweight,
            "chunks": timings,
        }
        if out.outputs:
            res["outputs"] = {k: v.cpu().numpy() for k, v in out.outputs.items()}
        if local is not None:
            res["local"] = local.cpu().numpy()
        res["seconds"] = time.perf_counter() - t0
        return res
