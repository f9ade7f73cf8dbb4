"""Starting or joining Ray without touching the network."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

_OFFLINE_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
    "RAY_DEDUP_LOGS": "0",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
}


def offline_env() -> None:
    """Keep Ray from probing cloud metadata addresses or sending usage stats."""
    for k, v in _OFFLINE_ENV.items():
        os.environ.setdefault(k, v)


@contextmanager
def _own_sigterm() -> Iterator[None]:
    """Keep this process's SIGTERM handler across ``ray.init``, where the application set
    one (:func:`simulator.run.stop.sigterm_raises`'s, which ends a run in one line):
    ``ray.init`` puts its own Python handler in its place and Ray's core worker a C one,
    which prints a stack dump on SIGTERM. A process that set none keeps Ray's. A SIGTERM that
    lands during ``ray.init`` (Ray's handler then exits with code 15, no word said) is handed to
    the application's handler."""
    main = threading.current_thread() is threading.main_thread()
    own = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    except SystemExit as e:  # a SIGTERM during ray.init met Ray's handler: sys.exit(15)
        if callable(own) and e.code == signal.SIGTERM:
            own(signal.SIGTERM, None)  # the application's: its stop (a one-line exit 143)
        raise
    finally:
        if callable(own) or own == signal.SIG_IGN:
            signal.signal(signal.SIGTERM, own)


def check_address(address: str, timeout: float = 5.0) -> None:
    """A cluster address's form (``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``), and that
    something answers at ``HOST:PORT`` (``ray.init`` retries an address where nothing does for
    ever, repeating a warning every ~36 s; one of another form ends in an ``AssertionError``).

    Raises
    ------
    ConnectionError
        One line naming the address and what is wrong with it.
    """
    if address in ("auto", "local"):
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or "/" in host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConnectionError(
            f"execution.ray_address: {address!r} is not HOST:PORT, ray://HOST:PORT or auto"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise ConnectionError(
            f"execution.ray_address: cannot join Ray at {address!r}: nothing answers at "
            f"{host}:{port} ({e.strerror or type(e).__name__})"
        ) from None


def ensure_ray(
    address: str | None = None, num_cpus: int | None = None, object_store_mb: int = 512
) -> None:
    """Start a local Ray (bounded object store, no dashboard) or join ``address``.

    Reuses a Ray already initialised in this process (one Ray per test session).
    """
    offline_env()
    import ray

    if ray.is_initialized():
        return
    if address and address != "local":  # "local": this machine's own Ray, as with none
        check_address(address)
        try:
            with _own_sigterm(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Ray client's UserWarning before its error
                ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError, AssertionError) as e:
            raise ConnectionError(
                f"execution.ray_address: cannot join Ray at {address!r}: {str(e).splitlines()[0]}"
            ) from None
        return
    if os.environ.get("RAY_ADDRESS"):
        print(
            f"note: RAY_ADDRESS={os.environ['RAY_ADDRESS']} is not used: this run starts its own "
            "Ray (join a cluster with --ray-address)",
            file=sys.stderr,
        )
    with _own_sigterm():
        # "local": a Ray of its own, even where `ray start` (or a cluster's ray_current_cluster
        # file, or RAY_ADDRESS) would make a plain ray.init() join another (until stop 51 that
        # failed: "When connecting to an existing cluster, object_store_memory must not be
        # provided")
        ray.init(
            address="local",
            num_cpus=num_cpus,
            include_dashboard=False,
            object_store_memory=object_store_mb * 1024 * 1024,
            logging_level=logging.WARNING,
            log_to_driver=False,
            configure_logging=True,
        )


def ray_is_up() -> bool:
    """Whether this process has a Ray initialised (without importing Ray where nothing did)."""
    ray = sys.modules.get("ray")
    return bool(ray is not None and ray.is_initialized())


def let_ray_go(was_up: bool) -> None:
    """Shut down the Ray a command started or joined, unless one was up before it
    (``was_up``: :func:`ray_is_up` at its start, e.g. a test session's); best effort."""
    if was_up or not ray_is_up():
        return
    import ray

    try:
        ray.shutdown()
    except Exception:  # noqa: BLE001 - a Ray already half gone: the stop line matters more
        pass
