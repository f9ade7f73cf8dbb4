"""Starting or joining Ray without touching the network."""

from __future__ import annotations

import ipaddress
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


#: an HTTP/2 client's connection preface and an empty SETTINGS frame: a Ray GCS (or Ray client
#: server), being gRPC, answers with a SETTINGS frame of its own (frame type 4 in byte 3)
_H2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def _split(address: str) -> tuple[str, int]:
    """``HOST:PORT`` of an address of the form ``HOST:PORT`` or ``ray://HOST:PORT``; a
    one-line ConnectionError for any other form."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or "/" in host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConnectionError(
            f"execution.ray_address: {address!r} is not HOST:PORT, ray://HOST:PORT or auto"
        )
    return host.strip("[]"), int(port)


def _not_grpc(sock: socket.socket) -> str | None:
    """None when the peer answers an HTTP/2 preface with a SETTINGS frame, as gRPC does; else
    what it did instead (its first bytes, or that it closed or kept silent)."""
    got = b""
    try:
        sock.sendall(_H2_HELLO)
        while len(got) < 9:
            chunk = sock.recv(256)
            if not chunk:
                break
            got += chunk
    except TimeoutError:
        if not got:
            return "it said nothing"
    except OSError as e:
        return f"it dropped the connection: {e.strerror or type(e).__name__}"
    if len(got) >= 9 and got[3] == 4:
        return None
    if not got:
        return "it closed the connection"
    line = got.splitlines()[0][:60] if got.strip() else got
    text = line.decode() if line.isascii() and line.decode().isprintable() else got[:16].hex()
    return f"it said {text!r}"


def resolve_auto(address: str) -> str:
    """The cluster ``auto`` names: ``RAY_ADDRESS`` when set, else the one ``ray start`` last
    started on this machine (Ray's ``ray_current_cluster`` file); any other address as it is.
    Ray's own ``auto`` falls back to any Ray process it finds on the machine, another run's
    private Ray included (which then ends under this run).

    Raises
    ------
    ConnectionError
        One line when ``auto`` names no cluster.
    """
    if address != "auto":
        return address
    found = os.environ.get("RAY_ADDRESS") or None
    if found is None:
        from ray._private.utils import read_ray_address

        found = read_ray_address()
    if not found or found in ("auto", "local"):
        raise ConnectionError(
            "execution.ray_address: 'auto' finds no cluster: RAY_ADDRESS is unset and no "
            "`ray start` ran on this machine (give the head's HOST:PORT)"
        )
    return found


def check_address(address: str, timeout: float = 5.0) -> None:
    """A cluster address's form (``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``), that
    something answers at ``HOST:PORT``, and that it speaks gRPC as a Ray GCS or Ray client
    server does (``ray.init`` retries an address where nothing, or something else, answers for
    ever; one of another form ends in an ``AssertionError``). With ``RAY_USE_TLS`` set only the
    connection is tried (the peer then speaks TLS first).

    Raises
    ------
    ConnectionError
        One line naming the address and what is wrong with it.
    """
    if address == "local":
        return
    label = address
    address = resolve_auto(address)
    if label != address:
        label = f"{label} ({address})"
    host, port = _split(address)
    where = f"execution.ray_address: cannot join Ray at {label!r}"
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
                return
            said = _not_grpc(sock)
    except OSError as e:
        raise ConnectionError(
            f"{where}: nothing answers at {host}:{port} ({e.strerror or type(e).__name__})"
        ) from None
    if said is not None:
        raise ConnectionError(
            f"{where}: {host}:{port} answers, but not as a Ray cluster ({said} to a gRPC "
            "connection; a Ray head's port is the one `ray start --head` printed, 6379 by default)"
        )


def _local(ip: str, node_ip: str) -> bool:
    """Whether ``ip`` is this machine's: a loopback address or its Ray node's IP."""
    try:
        return ip == node_ip or ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return False


def check_same_ray(address: str, current: str | None, node_ip: str) -> None:
    """Refuse (one-line ConnectionError) to use this process's Ray, whose GCS is at ``current``
    (None: unknown) on a node of IP ``node_ip``, for ``address`` unless both name the same GCS:
    the same port, and hosts that resolve to a common IP or both to this machine."""
    same = False
    try:
        address = resolve_auto(address)
    except ConnectionError:
        pass  # refused below as not this Ray
    if address != "auto" and not address.startswith("ray://") and current:
        host, port = _split(address)
        now_host, now_port = _split(current)
        if port == now_port:
            try:
                ips = {a[4][0] for a in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)}
                now = {a[4][0] for a in socket.getaddrinfo(now_host, port, type=socket.SOCK_STREAM)}
            except OSError:
                ips, now = set(), set()
            local = all(_local(ip, node_ip) for ip in ips | now)
            same = bool(ips & now) or (bool(ips and now) and local)
    if not same:
        raise ConnectionError(
            f"execution.ray_address: this process already runs Ray at "
            f"{current or 'an unknown address'}, not the one at {address!r} (one Ray per "
            "process: give its address, or run in a new process)"
        )


def ensure_ray(
    address: str | None = None, num_cpus: int | None = None, object_store_mb: int = 512
) -> None:
    """Start a local Ray (bounded object store, no dashboard) or join ``address``.

    Reuses a Ray already initialised in this process (one Ray per test session), provided
    ``address`` names it (:func:`check_same_ray`).
    """
    offline_env()
    import ray

    if ray.is_initialized():
        if address and address != "local":
            try:
                current = ray.get_runtime_context().gcs_address
            except Exception:  # noqa: BLE001 - a Ray client: no GCS address to compare
                current = None
            check_same_ray(address, current, ray.util.get_node_ip_address())
        return
    if address and address != "local":  # "local": this machine's own Ray, as with none
        check_address(address)
        given, address = address, resolve_auto(address)
        try:
            with _own_sigterm(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Ray client's UserWarning before its error
                ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError, AssertionError) as e:
            where = given if given == address else f"{given} ({address})"
            raise ConnectionError(
                f"execution.ray_address: cannot join Ray at {where!r}: {str(e).splitlines()[0]}"
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
