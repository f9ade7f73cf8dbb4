"""Fault re-placement: when an actor dies mid-round, a ``replace`` callback places its clients
on the candidate actors (:data:`Replace`), and :func:`regroup` checks and indexes its answer."""

from __future__ import annotations

from collections.abc import Callable

from actors.request import TrainTask

#: fault re-placement: (the dead actor's tasks, candidate actor indices) -> one group per
#: candidate, together holding each of the tasks once
Replace = Callable[[list[TrainTask], list[int]], list[list[TrainTask]]]


def regroup(tasks: list[TrainTask], groups: list[list[TrainTask]], n: int) -> list[list[int]]:
    """Positions in ``tasks`` of each of ``groups`` (a ``replace`` callback's answer for ``n``
    candidate actors); ValueError unless there are ``n`` groups holding each task once."""
    if len(groups) != n:
        raise ValueError(f"replace: returned {len(groups)} groups for {n} candidate actors")
    pos = {t.client_id: i for i, t in enumerate(tasks)}
    seen: set[int] = set()
    out: list[list[int]] = []
    for g in groups:
        out.append([])
        for t in g:
            if t.client_id not in pos:
                raise ValueError(
                    f"replace: client {t.client_id} is not among the dead actor's tasks"
                )
            if t.client_id in seen:
                raise ValueError(f"replace: client {t.client_id} placed twice")
            seen.add(t.client_id)
            out[-1].append(pos[t.client_id])
    missing = sorted(set(pos) - seen)
    if missing:
        raise ValueError(f"replace: clients {missing} of the dead actor were not placed")
    return out
