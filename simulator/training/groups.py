"""Model groups: clients of different architectures in one run (``--model-groups``).

Client ``k`` belongs to group ``k mod G`` (:func:`group_of`): deterministic, O(1) per client,
the same at any population size, no table. Group ``g`` has its own model
(:class:`ModelGroup`: spec, template module, flat layout, initial state built under seed
``seed + g``); the run's global state is the groups' flat models end to end (group 0 first),
so with one group everything is as before. Each group trains on its own: a stacked chunk never
mixes groups (:func:`split_by_group`), every trainer holds one template per group, and each
group's per-client tables carry the group in their name (:func:`table_name`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from simulator.config.fields import ConfigError
from simulator.config.groups import parse_groups
from simulator.training.flat import FlatLayout
from simulator.training.models import ModelSpec, SplitModel


def group_of(ids: np.ndarray | Sequence[int], num_groups: int) -> np.ndarray:
    """``[n]`` int64: the model group of each client id (``id mod G``)."""
    return np.asarray(ids, dtype=np.int64) % max(int(num_groups), 1)


def table_name(table: str, group: int) -> str:
    """The store table of ``table`` for ``group``: the name itself for group 0 (a one-group
    run's tables are unchanged), ``"{table}.g{group}"`` otherwise."""
    return table if group == 0 else f"{table}.g{group}"


@dataclass
class ModelGroup:
    """One group's model: its spec, a template module, its flat layout and initial state."""

    spec: ModelSpec
    model: SplitModel
    layout: FlatLayout
    initial: torch.Tensor

    @functools.cached_property
    def train_flops(self) -> int:
        """Training FLOPs per sample of the group's model (counted once, by torch)."""
        return self.spec.train_flops_per_sample()


def build_group(spec: ModelSpec, seed: int) -> ModelGroup:
    """The group of ``spec`` with its initial weights drawn under ``seed``."""
    model = spec.build(seed=seed)
    layout = FlatLayout(model)
    return ModelGroup(spec, model, layout, layout.flatten(model).clone())


def build_groups(
    m: Any, input_shape: Sequence[int], num_classes: int, ext: Any, seed: int
) -> list[ModelGroup]:
    """The run's model (``m``: the model section), or one per ``--model-groups`` entry, each
    with the algorithm's layers ``ext``; group g's weights are drawn under seed ``seed + g``."""
    shape = tuple(input_shape)
    specs = [
        ModelSpec(g.model, shape, num_classes, g.hidden, g.norm, ext)
        for g in parse_groups(m.model_groups, m.hidden, m.norm)
    ] or [ModelSpec(m.model, shape, num_classes, m.hidden, m.norm, ext)]
    for spec in specs:
        if spec.name == "cnn" and len(shape) != 3:
            raise ConfigError(
                f"model.model: 'cnn' needs image data; the dataset has input shape {shape}; "
                "use 'mlp' or 'logreg'"
            )
    return [build_group(spec, seed + g) for g, spec in enumerate(specs)]


def train_flops(groups: Sequence[ModelGroup]) -> float:
    """Training FLOPs per sample: the model's, or with several groups their mean (client k is
    in group k mod G: the groups hold as many clients, up to one)."""
    if len(groups) == 1:
        return groups[0].train_flops
    return float(np.mean([g.train_flops for g in groups]))


def client_train_flops(groups: Sequence[ModelGroup], ids: np.ndarray) -> float | np.ndarray:
    """Training FLOPs per sample of each client of ``ids`` on its own group's model (the
    virtual clock's compute cost on devices that declare GFLOP/s); one float with one group."""
    if len(groups) == 1:
        return groups[0].train_flops
    per_group = np.array([g.train_flops for g in groups], np.float64)
    return per_group[group_of(ids, len(groups))]


def offsets(groups: Sequence[ModelGroup]) -> list[int]:
    """Where each group's flat model starts in the global state (and, last, its size)."""
    return [0, *np.cumsum([g.layout.size for g in groups]).tolist()]


def split_by_group(
    ids: np.ndarray, chunks: list[int] | None, num_groups: int
) -> tuple[np.ndarray, list[int] | None]:
    """Positions of the tasks of clients ``ids`` and their consecutive chunk sizes (None: one
    chunk), re-cut so that no chunk mixes model groups: each chunk's tasks in group order
    (stable), the chunk split where the group changes. One group: ``arange`` and ``chunks``."""
    ids = np.asarray(ids, dtype=np.int64)
    if num_groups <= 1 or not len(ids):
        return np.arange(len(ids)), chunks
    order: list[np.ndarray] = []
    cut: list[int] = []
    at = 0
    for n in chunks if chunks is not None else [len(ids)]:
        grp = group_of(ids[at : at + n], num_groups)
        for g in np.unique(grp).tolist():
            pos = at + np.flatnonzero(grp == g)
            order.append(pos)
            cut.append(len(pos))
        at += n
    return np.concatenate(order), cut
