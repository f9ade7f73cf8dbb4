"""Starting or joining Ray without touching the network."""

from __future__ import annotations

import logging
import os
import signal
import threading
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
    which prints a stack dump on SIGTERM. A process that set none keeps Ray's."""
    main = threading.current_thread() is threading.main_thread()
    own = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if callable(own) or own == signal.SIG_IGN:
            signal.signal(signal.SIGTERM, own)


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
    if address:
        try:
            with _own_sigterm():
                ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise ConnectionError(
                f"execution.ray_address: cannot join Ray at {address!r}: {str(e).splitlines()[0]}"
            ) from None
        return
    with _own_sigterm():
        ray.init(
            num_cpus=num_cpus,
            include_dashboard=False,
            object_store_memory=object_store_mb * 1024 * 1024,
            logging_level=logging.WARNING,
            log_to_driver=False,
            configure_logging=True,
        )
