"""Starting a Ray pool without hanging: wait for the actors' resources, then for the actors.

Ray queues an actor whose resources are not free and waits for them forever. Two ways a pool
can meet that: another holder (a second Simulation in the same process while the first holds
the CPUs, another job on the cluster), and an actor that finds no node with room although a
packing exists (:func:`actors.kinds.check_schedulable` refuses a pool that no packing holds and
the pool pins its actors to a packing's nodes, but a search cut short leaves the placement to
Ray, which places actors one at a time and can fragment the nodes). Both now end in a one-line
ConfigError naming what is short; so does a dead actor's replacement that finds no room (its
node lost, its CPU taken meanwhile).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from simulator.config.fields import ConfigError

#: seconds a new pool waits for the resources its actors need to be free (a pool shut down
#: just before releases its actors' CPUs asynchronously) before refusing to start
FREE_WAIT_S = 20.0
#: seconds the pool's actors may take to start (import torch, receive the data) before the pool
#: gives up on the ones still unplaced
START_WAIT_S = 300.0
#: seconds between two looks at the cluster while a replacement actor starts (a node lost with
#: the dead actor is marked dead by Ray some 30 s after it went)
CHECK_EVERY_S = 2.0


class ClusterLost(RuntimeError):
    """The Ray cluster failed mid-run (a node lost with no room left for its actors, the cluster
    gone): the run stops with its last checkpoint; ``flags`` are what a resume should add (e.g.
    ``["--num-actors", "2"]`` for a cluster left with fewer CPUs)."""

    def __init__(self, message: str, flags: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.flags = list(flags)


def wait_for_free(
    need: dict[str, float],
    available: Callable[[], dict[str, float]],
    timeout: float | None = None,
    poll: float = 0.1,
) -> None:
    """Return once ``available()`` covers ``need``; raise ConfigError after ``timeout`` s
    (None: :data:`FREE_WAIT_S`), naming each resource that is short and how much is free."""
    timeout = FREE_WAIT_S if timeout is None else timeout
    deadline = time.monotonic() + timeout
    while True:
        free = available()
        short = {
            r: (v, float(free.get(r, 0.0)))
            for r, v in need.items()
            if float(free.get(r, 0.0)) + 1e-9 < v
        }
        if not short:
            return
        if time.monotonic() >= deadline:
            what = ", ".join(f"{v:g} {r} ({f:g} free)" for r, (v, f) in sorted(short.items()))
            raise ConfigError(
                f"the Ray cluster cannot start this pool's actors: they need "
                f"{what} after {timeout:g} s of waiting; another Simulation or "
                "job holds the rest (close it first, or ask for fewer actors)"
            )
        time.sleep(poll)


def started(
    ray: Any,
    refs: list[Any],
    kinds: Sequence[str],
    abandon: Callable[[], None],
    first: int = 0,
    check: Callable[[], None] | None = None,
) -> list[Any]:
    """The answers of the starting actors' first calls ``refs`` (actor ``first + i`` of kind
    ``kinds[i]``); after :data:`START_WAIT_S` s with some unanswered, ``abandon()`` (kill the
    pool) and raise ConfigError naming those actors. ``check()``, when given, is called every
    :data:`CHECK_EVERY_S` s of the wait (and before the ConfigError); what it raises (e.g.
    :class:`ClusterLost`: the cluster can no longer hold the pool) ends the wait, after
    ``abandon()``."""
    deadline = time.monotonic() + START_WAIT_S
    while True:
        left = max(0.0, deadline - time.monotonic())
        step = min(left, CHECK_EVERY_S) if check is not None else left
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=step)
        if len(ready) == len(refs):
            break
        if check is not None:
            try:
                check()
            except BaseException:
                abandon()
                raise
        if step >= left:
            break
    if len(ready) < len(refs):
        done = set(ready)
        late = [i for i, r in enumerate(refs) if r not in done]
        names = ", ".join(f"{first + i} ({kinds[i]})" for i in late[:8])
        more = f" and {len(late) - 8} more" if len(late) > 8 else ""
        abandon()
        raise ConfigError(
            f"the Ray cluster did not start actor(s) {names}{more} within "
            f"{START_WAIT_S:g} s: their resources fit the cluster's totals but "
            "no node has room for them (or the nodes are overloaded)"
        )
    try:
        return list(ray.get(refs))
    except ray.exceptions.RayActorError as e:  # its creation task raised: say what, in a line
        abandon()
        raise ConfigError(
            f"the Ray cluster could not start the pool's actors: {_cause(e)}"
        ) from None


def _cause(e: BaseException) -> str:
    """The last line of an actor's creation error that names an error (``Type: text``), else
    the first line of ``e``."""
    lines = [x.strip() for x in str(e).splitlines() if x.strip()]
    named = [x for x in lines if re.match(r"^[A-Za-z_.]*(Error|Exception): ", x)]
    return (named or lines or [type(e).__name__])[-1]
