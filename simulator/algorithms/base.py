"""The algorithm protocol: what one federated algorithm declares, in one file.

An algorithm is a class registered by name (:func:`simulator.algorithms.register`). It declares

* **its parameters** (:attr:`Algorithm.params`): typed, validated, given on the command line as
  ``--algorithm-params KEY=VALUE``; an unknown name lists the valid ones;
* **its client step**, written for ONE client: :meth:`Algorithm.client_loss` gets a
  :class:`~simulator.training.step.Step` (the client's parameters, its batch, the model's features
  and logits, the masked cross-entropy, the global model, the client's own tensors from the
  client-state store and the tensors the server sent) and returns the local objective. The
  trainer runs it vmapped over a chunk of clients or one client at a time (the reference); it must
  be vmap-safe (pure tensor code, no data-dependent Python control flow). After the local steps
  :meth:`Algorithm.client_finish` (also per client) returns named tensors: those named in
  :attr:`Algorithm.client_state` go back into the store, the others travel to the server as
  named *extras* beside the client's update row;
* **where its local steps start** (:meth:`Algorithm.client_start`, per client, vmap-safe): from
  a :class:`~simulator.training.step.Start` (the start the trainer would use, the global model,
  the client's store rows, its batches of one epoch, ``forward`` and ``split``) it
  returns the start parameters and store rows to write (FedALA's adaptive local aggregation);
  :meth:`Algorithm.start_iterations` bounds, per chunk and outside vmap, the iterations it may
  take, and :meth:`Algorithm.start_noise_size` the standard normals it draws from the client's
  own seeded stream (FedMA's own initialisations). The trainer
  (:mod:`simulator.training.loop`) calls it after placing the given starts and before the
  local steps, in both paths, only where a class overrides it; the start's rows join
  the client's outputs, the finish's rows win on a shared key;
* **its optimizer** (:meth:`Algorithm.optimizer`): SGD with momentum and weight decay;
* **what the server sends**: the server-state tensors named in :attr:`Algorithm.sends` go to
  every selected client each round; per-client tensors come from the store
  (:attr:`Algorithm.client_state`);
* **its server update** (:meth:`Algorithm.server_update`), which sees the defended aggregate, the
  rows, the verdicts and the extras in a :class:`ServerRound`;
* **which parameters are shared** (aggregated, defended, recorded on the ledger) and which stay on
  the client (:meth:`Algorithm.local_parameters`, e.g. FedBN's BatchNorm);
* **which defenses and round policies it accepts** (:attr:`Algorithm.rules`,
  :attr:`Algorithm.policies`; None: any): a server update that reads the raw rows in its own
  way (FedMA's matching) names the few whose result it can use, and a run with another one is
  refused in one line.

State lives outside the algorithm object: per-client tensors in the run's
:class:`~simulator.state.store.ClientStore`, server tensors in the ``server`` dict the engine keeps
and checkpoints. The object itself holds only its validated parameters, so it can travel to actors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch

from simulator.algorithms.exchange import Optimizer, ServerRound, WireInfo
from simulator.algorithms.params import Param, coerce
from simulator.algorithms.state_shapes import table_entries
from simulator.config.fields import ConfigError
from simulator.config.learning import AlgorithmConfig
from simulator.registry import check_params


class Algorithm:
    """FedAvg behaviour (McMahan et al., AISTATS 2017); subclasses override what they change."""

    name: ClassVar[str] = "fedavg"
    #: the algorithm's parameters, ``--algorithm-params KEY=VALUE``
    params: ClassVar[dict[str, Param]] = {}
    #: per-client tensors kept in the client-state store: table -> shape ("params": the
    #: trainable parameters, "model": the whole flat model, "row": the row the client sends,
    #: "public": one entry per public sample and class, an int: that many entries, or a
    #: callable ``(FlatLayout) -> int``: a size that depends on the model, e.g. FedALA's weights
    #: on its top layers; an algorithm whose sizes depend on its parameters declares the dict
    #: as a property; :meth:`state_entries`); absent clients
    #: start at zero
    client_state: ClassVar[dict[str, str | int | Callable[[Any], int]]] = {}
    #: server-state tensors sent to every selected client each round
    sends: ClassVar[tuple[str, ...]] = ()
    #: client-state tables (of any declared shape) trained beside the model, by the same
    #: optimizer on the same batches (Ditto's personal model, FedAF's condensed images): the
    #: step sees them as ``Step.aux``
    client_trainable: ClassVar[tuple[str, ...]] = ()
    #: the client-state table from which :meth:`personal_model` builds the model the per-client
    #: evaluation uses instead of the global one (Ditto: a whole personal model of trainable
    #: parameters; FedVB: the branches the client holds)
    personal: ClassVar[str | None] = None
    #: whether the client step draws random numbers with torch (vmap then uses
    #: randomness="different"; the two paths then differ). Prefer :meth:`noise_size`.
    random: ClassVar[bool] = False
    #: what a client sends as its row: ``"update"`` (its trained shared parameters minus the
    #: global ones, the default), or the name of a :meth:`client_finish` output sent instead
    #: (predictions on a public set, condensed data, ...), flattened to :meth:`row_entries`
    #: entries. The row is what defenses see, attacks rewrite and the ledger records; a rule
    #: or a model attack that only makes sense on model updates refuses any other upload.
    upload: ClassVar[str] = "update"
    #: the server update reads the round's rows themselves (:attr:`ServerRound.rows`), not only
    #: the defended aggregate: the actors then never pre-aggregate them
    reads_rows: ClassVar[bool] = False
    #: the name of a server-sent tensor (one of :attr:`sends`, ``[P]`` over the trainable
    #: parameters) that multiplies each client's gradient: 1 trains an entry, 0 freezes it
    #: (and its momentum and weight decay); None trains every entry
    train_mask: ClassVar[str | None] = None
    #: the defenses (registered names) whose result the server update can use; None: any. A
    #: run with another defense is refused in one line (:func:`simulator.round.parts.check_upload`)
    rules: ClassVar[tuple[str, ...] | None] = None
    #: the round policies (registered names) the server update can follow; None: any (e.g.
    #: only those whose rows were all trained from the round's global model)
    policies: ClassVar[tuple[str, ...] | None] = None
    #: clients may hold models of different architectures (``--model-groups``: a model per
    #: client group, each trained on its own). Such an algorithm's rows are not model updates
    #: and have the same size for every group (:meth:`row_entries`), it keeps its clients'
    #: models on the clients (:meth:`local_parameters`) and its client-state tables are not
    #: model-shaped; the global model is the groups' flat models end to end
    heterogeneous: ClassVar[bool] = False
    #: the client step uses the server's public set (``--public-fraction`` > 0): the engine
    #: sends its inputs to every selected client each round as the server tensor
    #: :data:`~simulator.training.step.PUBLIC_INPUTS` (``Step.shared``, ``Finish.shared``), over
    #: which :meth:`public_passes` passes run
    uses_public: ClassVar[bool] = False
    #: the server keeps no global model that learns (KT-pFL: only the clients' models do), so
    #: a run's ``final_accuracy`` is an untrained model's; a run without per-client evaluation
    #: (``--client-test-fraction``) is warned at its start
    learns_global: ClassVar[bool] = True

    def __init__(self, cfg: AlgorithmConfig, **params: Any) -> None:
        self.cfg = cfg
        check_params(
            f"algorithm.algorithm_params: algorithm {self.name!r}",
            params,
            self.params,
            error=ConfigError,
        )
        self.p: dict[str, Any] = {
            k: coerce(self.name, k, spec, params.get(k, spec.default))
            for k, spec in self.params.items()
        }

    # -- where parameters live ---------------------------------------------------------------
    def local_parameters(self, names: list[str]) -> list[str]:
        """Names (of the flat layout) that stay on each client: never averaged, defended or
        recorded. Default: none."""
        return []

    def row_entries(self, layout: Any) -> int | str | None:
        """Entries of the row a client sends when :attr:`upload` is not ``"update"`` (``layout``:
        the model's :class:`~simulator.training.flat.FlatLayout`), or ``"public"`` for one entry
        per sample of the server's public set and class (predictions on it); None for model
        updates, whose rows hold the shared parameters."""
        if self.upload != "update":
            raise NotImplementedError(
                f"algorithm {self.name!r} uploads {self.upload!r}: it must say how many "
                "entries a row has (row_entries)"
            )
        return None

    def state_entries(self, table: str, layout: Any, public_entries: int = 0) -> int:
        """Entries of one row of the client-state table ``table`` (its declared
        :attr:`client_state` shape resolved for a model of ``layout``; ``public_entries``: the
        run's public samples x classes, 0 without a public set); one line naming the valid
        shapes otherwise (:func:`~simulator.algorithms.state_shapes.table_entries`)."""
        return table_entries(self, table, layout, public_entries)

    # -- the model -------------------------------------------------------------------------
    def extend_model(self, model: Any, spec: Any) -> Any:
        """The model with this algorithm's layers added (MOON's projection head, FedFA's
        augmentation layers); called wherever the model is built, under the model seed.
        Default: the model unchanged."""
        return model

    # -- the client side (runs where clients train) ------------------------------------------
    def noise_size(self, model: Any, batch_size: int) -> int:
        """Standard-normal draws per local step that the client's forward needs (read by the
        model's layers from :data:`simulator.training.models.STEP_NOISE`). They come from each
        client's
        own seeded stream, so the vectorized and sequential paths see the same draws.
        Default: 0."""
        return 0

    def trainable_start(
        self, name: str, stored: torch.Tensor, global_flat: torch.Tensor, data: Any = None
    ) -> torch.Tensor:
        """Where a trained client-state table (:attr:`client_trainable`) starts this round, for
        ONE client (vmap-safe). ``data``: the client's batches of one epoch ``(x [S1, B, ...],
        y [S1, B], mask [S1, B])``, the mask marking each of its samples once (as in
        :class:`~simulator.training.step.Finish`), for a start drawn from its own samples
        (FedAF's condensed images); None where none is at hand. Default: its stored value
        (zeros before the first round)."""
        return stored

    def public_passes(self) -> tuple[int, int]:
        """Passes over the public inputs each client takes ``(before, after)`` its local
        epochs (needs :attr:`uses_public`): in batches of the run's batch size, each client in
        its own seeded order, by the client optimizer with a fresh momentum buffer; the step
        sees ``Step.public`` True, the batch's public rows in ``Step.index``, zero labels and a
        zero ``ce``. Default: none."""
        return (0, 0)

    def client_start(self, s: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Where ONE client's local steps start (``s``: a :class:`simulator.training.step.Start`;
        vmap-safe): the ``[P]`` trainable parameters to train from, and store rows to write
        (keys of :attr:`client_state`; a row :meth:`client_finish` also returns is the
        finish's). The update row stays relative to the round's global model. Default:
        ``(s.flat, {})``; the trainer calls it only where a class overrides it."""
        return s.flat, {}

    def start_iterations(self, state: dict[str, torch.Tensor]) -> int:
        """A bound on the iterations :meth:`client_start` needs for a chunk of clients, read
        outside vmap from their store rows (``{table: [K, ...]}``; the sequential path asks
        for each client alone); the start sees it as ``Start.iterations``. A client's start
        must give the same result under any bound at least its own (extra iterations frozen
        per client), so the two paths agree. Default: 0."""
        return 0

    def start_noise_size(self, layout: Any) -> int:
        """Standard-normal draws :meth:`client_start` reads as ``Start.noise`` (``layout``: the
        model's :class:`~simulator.training.flat.FlatLayout`), from each client's own seeded
        stream (apart from its steps' noise), so both paths see the same draws. Default: 0."""
        return 0

    def optimizer(self) -> Optimizer:
        c = self.cfg
        return Optimizer(c.lr, c.momentum, c.weight_decay)

    def client_loss(self, s: Any) -> torch.Tensor:
        """The local objective of one client on its current batch (``s``: a
        :class:`simulator.training.step.Step`). Default: the masked mean cross-entropy."""
        return s.ce

    def client_finish(self, f: Any) -> dict[str, torch.Tensor]:
        """Per-client tensors after local training (``f``: a
        :class:`simulator.training.step.Finish`):
        new store rows (keys of :attr:`client_state`) and extras for the server."""
        return {}

    def personal_model(self, global_flat: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
        """The full flat model a client is evaluated with, from the global one and its row of
        the :attr:`personal` table (a client that never trained has a zero row). Default: the
        row's trainable parameters with the global buffers."""
        if not bool(row.any()):
            return global_flat
        return torch.cat([row, global_flat[row.numel() :]])

    # -- local work ---------------------------------------------------------------------------
    def client_epochs(self, num_selected: int, rng: np.random.Generator) -> np.ndarray:
        """Local epochs of each selected client.

        With ``straggler_fraction`` > 0, that fraction of the selected clients runs
        x ~ U{1..E} epochs (Li et al., MLSys 2020, Sec. 5.2); the rest run E.
        """
        e = np.full(num_selected, self.cfg.local_epochs, dtype=np.int64)
        n_strag = int(round(self.cfg.straggler_fraction * num_selected))
        if n_strag:
            who = rng.choice(num_selected, size=n_strag, replace=False)
            e[who] = rng.integers(1, self.cfg.local_epochs + 1, size=n_strag)
        return e

    def keep_partial_work(self) -> bool:
        """Whether updates of clients that did partial work are aggregated."""
        return not self.cfg.drop_stragglers

    # -- the server side ----------------------------------------------------------------------
    def choose(
        self,
        candidates: np.ndarray,
        m: int,
        rng: np.random.Generator,
        server: dict[str, torch.Tensor],
        store: Any = None,
    ) -> np.ndarray | None:
        """The round's clients among the eligible ``candidates`` (sorted ids), ``m`` of them, or
        None for the round policy's uniform choice (the default). ``server`` is the server
        state, ``store`` the run's client-state store (see :attr:`ServerRound.store`).
        Overriding it costs a pass over the population per round (FedUFO's dynamic
        sampling)."""
        return None

    def chooses(self) -> bool:
        """Whether :meth:`choose` may pick clients in this run (the engine then lists the
        eligible population each round). Default: whether the class overrides it."""
        return type(self).choose is not Algorithm.choose

    def downloads_model(self) -> bool:
        """Whether clients download the global model each round (a compressed download is a
        change of it). None travels in FedMA's one-shot modes (clients start from their own
        draw) or in KT-pFL (the server sends targets)."""
        return True

    def wire_bytes(self, w: WireInfo) -> tuple[np.ndarray, np.ndarray]:
        """``(upload, download)`` bytes of each selected client's transfers this round (float64
        ``[K]`` each, aligned with ``w.client_ids``), before any compression option: every
        extra that travels counts (a mask compresses a transfer's first ``4 * w.shared_size``
        bytes, the model's, and leaves the rest dense). Default: the shared float32 model."""
        n = np.full(len(w.client_ids), 4.0 * w.shared_size, dtype=np.float64)
        return n, n.copy()

    def init_server(self, global_flat: torch.Tensor, num_params: int) -> dict[str, torch.Tensor]:
        """Initial server state (checkpointed with the run)."""
        return {}

    def server_update(self, r: ServerRound) -> torch.Tensor:
        """The next global model: ``global + server_lr * delta``."""
        return r.global_flat + self.cfg.server_lr * r.delta
