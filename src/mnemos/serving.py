"""Running the HTTP server: one process, or several that each listen with `SO_REUSEPORT`.

With several workers, each process binds its own listening socket to the same address with
`SO_REUSEPORT`, and the kernel spreads incoming connections over them. (With one socket shared
by every worker, as `uvicorn --workers` does, the first process to wake accepts every pending
connection: a burst of keep-alive clients could all land on one process and leave the others
idle.) The parent only supervises: it restarts a worker that dies, and on SIGTERM or SIGINT asks
every worker to drain and exits 0 once they have.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.process import BaseProcess
from typing import Any

import uvicorn

from mnemos.config import Settings, load_settings
from mnemos.http_guard import ConnectionLimits, guarded_protocol
from mnemos.logs import log_config

METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"

APP = "mnemos.api.app:factory"
DRAIN_SECONDS = 20
RESTART_PAUSE_SECONDS = 1.0


def server_config(settings: Settings, log_level: str, **extra: Any) -> uvicorn.Config:
    """uvicorn with Mnemos's connection limits (`mnemos.http_guard`).

    No `limit_concurrency`: uvicorn counts open sockets against it, so idle ones could starve
    everyone; the application caps requests in flight instead (`InFlightLimitMiddleware`).
    Logging follows `MNEMOS_LOG_FORMAT` (`mnemos.logs`); uvicorn's access log is replaced by
    Mnemos's own access line.
    """
    return uvicorn.Config(
        APP,
        factory=True,
        log_level=log_level,
        log_config=log_config(settings, log_level),
        access_log=False,
        http=guarded_protocol(ConnectionLimits.from_settings(settings)),
        ws="none",
        timeout_keep_alive=settings.keep_alive_seconds,
        timeout_graceful_shutdown=DRAIN_SECONDS,
        **extra,
    )


def serve_one(settings: Settings, host: str, port: int, log_level: str) -> None:
    """One process: uvicorn drains in-flight requests on SIGTERM, then this exits 0."""
    uvicorn.Server(server_config(settings, log_level, host=host, port=port)).run()


@contextmanager
def shared_metrics(settings: Settings, workers: int) -> Iterator[None]:
    """With metrics on and several processes: a fresh directory for this run's samples, named
    to the workers by `PROMETHEUS_MULTIPROC_DIR` (read by prometheus_client at import), and
    removed when the server stops, so no run counts another's samples."""
    if not settings.metrics or workers < 2:
        yield
        return
    directory = tempfile.mkdtemp(prefix="mnemos-metrics-")
    os.environ[METRICS_DIR_ENV] = directory
    try:
        yield
    finally:
        os.environ.pop(METRICS_DIR_ENV, None)
        shutil.rmtree(directory, ignore_errors=True)


def _forget(process: BaseProcess) -> None:
    """A dead worker's live gauges (connections in use) no longer count."""
    if os.environ.get(METRICS_DIR_ENV) and process.pid is not None:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(process.pid)  # type: ignore[no-untyped-call]


def _listener(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def _worker(host: str, port: int, log_level: str) -> None:
    # Bound, not listening: uvicorn's server calls listen() once the app has started, so the
    # kernel hands a new or restarted worker no connection before it can answer one.
    sock = _listener(host, port)
    # Settings come from the environment the parent was given (and the database URL it set).
    uvicorn.Server(server_config(load_settings(), log_level)).run(sockets=[sock])


def serve_many(host: str, port: int, workers: int, log_level: str) -> None:
    """`workers` processes on one address; returns when they have all stopped after a signal."""
    # Fail here, not in every worker, when something else holds the address. The probe is bound
    # but never listens, so the kernel never hands it a connection.
    _listener(host, port).close()
    context = multiprocessing.get_context("spawn")
    stopping = False

    def start() -> BaseProcess:
        process = context.Process(target=_worker, args=(host, port, log_level), daemon=False)
        process.start()
        return process

    def stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    running = [start() for _ in range(workers)]
    while not stopping:
        time.sleep(0.2)
        for index, process in enumerate(running):
            if not process.is_alive() and not stopping:
                sys.stderr.write(
                    f"mnemos: worker {process.pid} exited ({process.exitcode}); starting another\n"
                )
                _forget(process)
                time.sleep(RESTART_PAUSE_SECONDS)
                running[index] = start()
    for process in running:
        if process.is_alive() and process.pid is not None:
            process.terminate()  # SIGTERM: uvicorn stops accepting and drains
    deadline = time.monotonic() + DRAIN_SECONDS + 5
    for process in running:
        process.join(timeout=max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()
