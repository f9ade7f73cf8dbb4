"""Will the run fit? A memory and disk estimate made before anything starts.

A run that cannot fit must say so up front with one line (exit code 2 on the command line), never
die to the kernel's OOM killer mid-way. The estimate adds up what grows with the run's size:

* the training data, counted from the files on disk for a dataset read with ``--data-path``
  (:mod:`simulator.data.disk_size`: idx headers, CIFAR batch sizes, LEAF ``num_samples``),
  else from the table below;
* the device arrays (six float64 values per device: five profile fields and the availability
  phase; a seventh, the declared GFLOP/s, with ``--gflops-median``) and, for a real partition,
  its index;
* the client-state store: its memory budget, or less when fewer clients can ever train;
* one round's buffers: the cohort's gathered batches on the workers, its update rows and
  client-state rows in flight (driver and workers);
* the processes: the driver and, with a Ray of its own, each actor and Ray's own services
  (measured here: ~0.45 GB per torch process, ~0.6 GB for Ray; a cluster joined by address
  holds its actors on its nodes);
* with ``--ledger``: the recorder process, and a round's update rows four times over (the
  three slots they travel to it through, :mod:`ledger.slots`, and its pack buffer).

Disk: the store's spill file and its checkpoint deltas can hold every client that ever trains;
with ``--ledger`` the round packs hold every round's update rows, signed records and global model
(a 1,000-client round of the 8,970-parameter digits MLP is ~37 MB; an algorithm's extras, such as
SCAFFOLD's control variates, come on top and are not counted). A resumed run counts only the
rounds whose packs are not yet written.
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from actors.kinds import parse_actor_kinds
from simulator.config.fields import ConfigError
from simulator.config.sections import Config
from simulator.data.disk_size import rows_on_disk

if TYPE_CHECKING:
    from simulator.training.flat import FlatLayout

GB = 1e9
#: resident memory of one Python process with torch imported, and of Ray's own services
PROCESS_BYTES = 0.45 * GB
RAY_BYTES = 0.6 * GB
#: bytes a round pack holds per submission beside its update row: its signed record, verdict,
#: admission and index entries (~1,050 bytes measured with digits; rounded up)
PACK_RECORD_BYTES = 2048
#: copies of a round's update rows a ``--ledger`` run holds in memory beside the run's own: the
#: three slots they travel to the recorder through, and the recorder's pack buffer
LEDGER_ROW_COPIES = 4
#: (input shape, classes, training rows) of the registered datasets, for estimates only; a
#: dataset read from ``--data-path`` takes its rows (and shape) from the files instead
DATASETS: dict[str, tuple[tuple[int, ...], int, int]] = {
    "digits": ((1, 8, 8), 10, 1438),
    "mnist5k": ((1, 28, 28), 10, 4000),
    "synthetic": ((60,), 10, 30_000),
    "mnist1d": ((40,), 10, 4000),
    "mnist_idx": ((1, 28, 28), 10, 60_000),
    "cifar10": ((3, 32, 32), 10, 50_000),
    "femnist_leaf": ((1, 28, 28), 62, 800_000),
}


@dataclass(frozen=True)
class Estimate:
    """Bytes by item; ``total`` is their sum."""

    devices: float
    dataset: float
    state: float
    round: float
    processes: float
    disk: float
    ledger: float = 0.0  # disk: the ledger's round packs still to be written

    @property
    def total(self) -> float:
        return self.devices + self.dataset + self.state + self.round + self.processes

    def line(self) -> str:
        return (
            f"~{self.total / GB:.1f} GB (devices {self.devices / GB:.2f}, data "
            f"{self.dataset / GB:.2f}, client state {self.state / GB:.2f}, round buffers "
            f"{self.round / GB:.2f}, processes {self.processes / GB:.2f})"
        )


def dataset_size(cfg: Config) -> tuple[tuple[int, ...], int, int]:
    """(input shape, classes, training rows) of the configured dataset: from the table, with
    the rows (and shape) the files hold for a dataset read from ``--data-path``."""
    shape, classes, rows = DATASETS.get(cfg.data.dataset, ((1, 28, 28), 10, 60_000))
    disk = rows_on_disk(cfg.data.dataset, cfg.data.data_path)
    if disk is not None:
        shape, rows = disk.shape or shape, disk.rows
    return shape, classes, rows


def model_layout(cfg: Config) -> FlatLayout:
    """The flat layout of the configured model; with ``--model-groups`` the largest group's
    (an upper bound: every per-client figure below is taken at that size)."""
    from simulator.config.groups import parse_groups
    from simulator.run.federation import model_extension
    from simulator.training.flat import FlatLayout
    from simulator.training.models import ModelSpec

    shape, classes, _ = dataset_size(cfg)
    m = cfg.model
    groups = parse_groups(m.model_groups, m.hidden, m.norm)
    archs = [(g.model, g.hidden, g.norm) for g in groups] or [(m.model, m.hidden, m.norm)]
    with torch.device("meta"):  # shapes only: a model too large to allocate is still sized
        layouts = [
            FlatLayout(ModelSpec(a, shape, classes, h, nm, model_extension(cfg)).build(seed=0))
            for a, h, nm in archs
        ]
    return max(layouts, key=lambda lay: lay.size)


def estimate(cfg: Config, workers: int | None = None) -> Estimate:
    """Memory (and disk) the run needs, by item."""
    from simulator.algorithms import make_algorithm

    d, ex = cfg.data, cfg.execution
    n, k = d.num_clients, min(cfg.experiment.clients_per_round, d.num_clients)
    shape, classes, rows = dataset_size(cfg)
    feat = math.prod(shape)
    public = math.ceil(d.public_fraction * rows) * classes  # a 'public' table's entries
    layout = model_layout(cfg)
    p_full = layout.size
    if workers is None:
        kinds = sum(a.count for a in parse_actor_kinds(ex.actor_kinds)) if ex.actor_kinds else 0
        workers = (ex.num_actors or kinds or (os.cpu_count() or 1)) if ex.backend == "ray" else 1
    algo = make_algorithm(cfg.algorithm)
    state_row = 4 * sum(algo.state_entries(t, layout, public) for t in algo.client_state)
    if cfg.defense.defense == "siren":
        state_row += 4 * p_full
    per_device = 48.0 + (8.0 if cfg.devices.gflops_median > 0 else 0.0)
    devices = per_device * n + (8.0 * rows if d.partition != "virtual" else 0.0)
    dataset = 2.0 * 4 * rows * feat  # the driver's copy and the object store's
    ever = min(n, cfg.experiment.rounds * k)  # clients that can ever hold state
    state = min(float(ex.state_memory_bytes), float(ever * state_row))
    size = (
        int(d.partition_kwargs()["size_max"])
        if d.partition == "virtual"
        else max(1, math.ceil(rows / max(1, n)) * 4)
    )
    steps = math.ceil(size / cfg.algorithm.batch_size) * cfg.algorithm.local_epochs
    gathered = k * steps * cfg.algorithm.batch_size * (feat + 2) * 4
    per_client = 4 * p_full * 3 + 3 * state_row  # rows, start models, optimizer; state in/out
    rnd = gathered + 2.0 * k * per_client
    # joining a cluster (--ray-address): its actors and services live on its nodes, which Ray
    # places them on and refuses an actor that does not fit; this machine holds the driver
    here = ex.backend == "ray" and ex.ray_address in (None, "local")
    procs = PROCESS_BYTES + (workers * PROCESS_BYTES + RAY_BYTES if here else 0)
    if cfg.ledger.enabled:  # the recorder; three row slots and its pack buffer
        procs += PROCESS_BYTES
        rnd += LEDGER_ROW_COPIES * k * 4.0 * p_full
    disk = 2.0 * max(0.0, ever * state_row - state) + (ever * state_row if state_row else 0.0)
    return Estimate(devices, dataset, state, rnd, procs, disk, ledger_disk(cfg, p_full, k))


def ledger_disk(cfg: Config, params: int, cohort: int) -> float:
    """Bytes of the round packs ``--ledger`` will still write: per round, each submission's
    update row and signed record, and the new global model (0 without the ledger). A resumed
    run's rounds with a pack already on disk are not counted again."""
    if not cfg.ledger.enabled:
        return 0.0
    rounds, model = cfg.experiment.rounds, 4.0 * params
    initial = model  # the first pack holds the initial model
    if cfg.output.resume:
        packs = Path(cfg.output.out) / "ledger" / "packs"
        written = sum(1 for _ in packs.iterdir()) if packs.is_dir() else 0
        rounds, initial = max(0, rounds - max(0, written - 1)), 0.0
    return initial + rounds * (cohort * (model + PACK_RECORD_BYTES) + model)


def _largest(est: Estimate, cfg: Config) -> tuple[str, str]:
    """The field behind the estimate's largest item, and what to lower."""
    params = f"{model_layout(cfg).size:,} parameters"
    one = cfg.experiment.clients_per_round <= 1
    items = {
        "devices": ("data.num_clients", "lower --num-clients"),
        "dataset": ("data.dataset", "choose a smaller dataset"),
        "state": (
            "execution.state_memory",
            "lower --state-memory (client state beyond it spills to disk)",
        ),
        "round": (
            ("model.hidden", f"choose a smaller model (it has {params}: --model, --hidden)")
            if one
            else (
                "experiment.clients_per_round",
                f"lower --clients-per-round, or the model's size ({params}: --model, --hidden)",
            )
        ),
        "processes": ("execution.num_actors", "lower --num-actors"),
    }
    return items[max(items, key=lambda k: getattr(est, k))]


def available_memory(cgroup: Path = Path("/sys/fs/cgroup")) -> float:
    """Bytes of memory available to new allocations: the machine's ``MemAvailable``, or less
    where this process's cgroup (v2: a container's limit) leaves less room under its
    ``memory.max``."""
    room = _cgroup_room(cgroup)
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return min(float(line.split()[1]) * 1024, room)
    except OSError:
        pass
    return min(float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")), room)


def _cgroup_room(root: Path) -> float:
    """``memory.max - memory.current`` of this process's cgroup v2, the reclaimable page cache
    (``inactive_file`` of ``memory.stat``) counted as room; inf where unlimited or unknown."""
    try:
        rel = Path("/proc/self/cgroup").read_text().split("::", 1)[1].strip().lstrip("/")
    except (OSError, IndexError):
        rel = ""
    for d in (root / rel, root):
        try:
            limit = (d / "memory.max").read_text().strip()
            used = float((d / "memory.current").read_text().strip())
        except (OSError, ValueError):
            continue
        if limit == "max":
            return float("inf")
        cache = 0.0
        try:
            for line in (d / "memory.stat").read_text().splitlines():
                if line.startswith("inactive_file "):
                    cache = float(line.split()[1])
        except (OSError, ValueError, IndexError):
            pass
        return max(0.0, float(limit) - used + cache)
    return float("inf")


def check_budget(
    cfg: Config, available: float | None = None, disk_free: float | None = None
) -> Estimate:
    """Raise :class:`ConfigError` (one line, with the estimate) when the run cannot fit in the
    memory available (or its client state on the output disk); returns the estimate."""
    est = estimate(cfg)
    avail = available_memory() if available is None else available
    if est.total > 0.9 * avail:
        field, advice = _largest(est, cfg)
        raise ConfigError(
            f"{field}: this run needs {est.line()} but "
            f"{avail / GB:.1f} GB of memory is available; {advice}"
        )
    if est.disk or est.ledger:
        out = Path(cfg.output.out)
        probe = next((p for p in (out, *out.parents) if p.exists()), Path("."))
        free = shutil.disk_usage(probe).free if disk_free is None else disk_free
        if est.disk > free:
            raise ConfigError(
                f"execution.state_memory: client state that spills to "
                f"{out / 'state'} may need {est.disk / GB:.1f} GB of disk; "
                f"{free / GB:.1f} GB is free; raise --state-memory or lower "
                "--rounds or --clients-per-round"
            )
        if est.disk + est.ledger > free:
            spill = f" beside {est.disk / GB:.2f} GB of spilled client state" if est.disk else ""
            raise ConfigError(
                f"ledger.ledger: the round packs in {out / 'ledger'} need "
                f"~{est.ledger / GB:.2f} GB of disk{spill}; {free / GB:.2f} GB is free; lower "
                "--rounds or --clients-per-round, or free disk"
            )
    return est
