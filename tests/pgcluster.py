"""A throwaway PostgreSQL primary and a streaming replica of it, on loopback ports.

The machine's own cluster refuses replication connections (its `pg_hba.conf` has no
`replication` line), so tests and the replica benchmark build their own pair: `initdb` a small
primary with replication enabled, `pg_basebackup -R` a copy of it, start both on free ports.
Both are stopped and their data directories removed on exit. PostgreSQL refuses to run as root:
as root, every binary runs as the `postgres` system user.

    with replica_pair() as (primary, replica):
        primary.url("mnemos"), replica.url("mnemos")
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import psycopg

BIN_GLOB = "/usr/lib/postgresql/*/bin"
NEEDED = ("initdb", "pg_ctl", "pg_basebackup")
# Small on purpose: the machine is shared. fsync is off (a throwaway cluster needs no
# durability); commits still wait for their WAL to be written, as in production.
PRIMARY_CONF = """
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '{sockets}'
max_connections = 120
shared_buffers = 16MB
fsync = off
full_page_writes = off
wal_level = replica
max_wal_senders = 4
wal_keep_size = 64MB
hot_standby = on
autovacuum_naptime = 10s
"""


def postgres_bin() -> Path | None:
    """The directory of the newest installed PostgreSQL binaries with everything needed."""
    found = sorted(Path("/").glob(BIN_GLOB.lstrip("/")), key=lambda p: int(p.parent.name))
    for directory in reversed(found):
        if all((directory / name).exists() for name in NEEDED):
            return directory
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _as_postgres(command: list[str]) -> list[str]:
    """PostgreSQL will not run as root: run as the `postgres` system user then."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *command]
    return command


def _owned_directory(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    (path / "owner.pid").write_text(str(os.getpid()))
    if os.geteuid() == 0:
        account = pwd.getpwnam("postgres")
        os.chown(path, account.pw_uid, account.pw_gid)
    return path


@dataclass
class Cluster:
    """One running PostgreSQL server (a data directory and a port)."""

    bin: Path
    data: Path
    port: int

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def run(self, *args: str) -> None:
        done = subprocess.run(
            _as_postgres([str(self.bin / args[0]), *args[1:]]),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {done.stderr.strip() or done.stdout.strip()}")

    def start(self) -> None:
        log = self.data / "server.log"
        self.run(
            "pg_ctl",
            "start",
            "-w",
            "-t",
            "60",
            "-D",
            str(self.data),
            "-l",
            str(log),
            "-o",
            f"-p {self.port}",
        )

    def running(self) -> bool:
        done = subprocess.run(
            _as_postgres([str(self.bin / "pg_ctl"), "status", "-D", str(self.data)]),
            capture_output=True,
            timeout=60,
        )
        return done.returncode == 0

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (`immediate` is a crash: no shutdown checkpoint)."""
        with suppress(RuntimeError, subprocess.TimeoutExpired):
            self.run("pg_ctl", "stop", "-w", "-t", "60", "-m", mode, "-D", str(self.data))

    def sql(self, statement: str, database: str = "postgres") -> object:
        """Run one statement in autocommit; its first column of the first row, if any."""
        with psycopg.connect(self.url(database), autocommit=True, connect_timeout=10) as conn:
            cursor = conn.execute(statement)
            row = cursor.fetchone() if cursor.description else None
            return row[0] if row else None


def _init_primary(bin_dir: Path) -> Cluster:
    data = _owned_directory("mnemos-primary-")
    cluster = Cluster(bin_dir, data / "data", free_port())
    cluster.run(
        "initdb",
        "-D",
        str(cluster.data),
        "--auth=trust",
        "--username=postgres",
        "--encoding=UTF8",
        "--locale=C.UTF-8",
        "--no-sync",
    )
    with (cluster.data / "postgresql.conf").open("a") as conf:
        conf.write(PRIMARY_CONF.format(port=cluster.port, sockets=cluster.data))
    cluster.start()
    return cluster


def _clone_replica(primary: Cluster) -> Cluster:
    data = _owned_directory("mnemos-replica-")
    replica = Cluster(primary.bin, data / "data", free_port())
    primary.run(
        "pg_basebackup",
        "-h",
        "127.0.0.1",
        "-p",
        str(primary.port),
        "-U",
        "postgres",
        "-D",
        str(replica.data),
        "-R",
        "-X",
        "stream",
        "--checkpoint=fast",
        "--no-sync",
    )
    with (replica.data / "postgresql.conf").open("a") as conf:
        conf.write(f"\nport = {replica.port}\nunix_socket_directories = '{replica.data}'\n")
    replica.start()
    return replica


def wait_until_streaming(primary: Cluster, timeout: float = 60) -> None:
    """Wait until the primary has a streaming standby (a condition, not a timing check)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if primary.sql("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"):
            return
        time.sleep(0.1)
    raise RuntimeError("the replica did not start streaming")


def _reap_orphans() -> None:
    """Stop and remove the clusters of test runs that were killed before they could."""
    temp = Path(tempfile.gettempdir())
    owners = [*temp.glob("mnemos-primary-*/owner.pid"), *temp.glob("mnemos-replica-*/owner.pid")]
    for owner in owners:
        try:
            os.kill(int(owner.read_text()), 0)
            continue  # its run is still going
        except (ProcessLookupError, ValueError):
            pass
        except PermissionError:
            continue
        bin_dir = postgres_bin()
        data = owner.parent / "data"
        if bin_dir is not None and (data / "postmaster.pid").exists():
            Cluster(bin_dir, data, 0).stop("immediate")
        shutil.rmtree(owner.parent, ignore_errors=True)


def _remove(cluster: Cluster | None) -> None:
    if cluster is None:
        return
    cluster.stop("immediate")
    shutil.rmtree(cluster.data.parent, ignore_errors=True)


@contextmanager
def replica_pair(bin_dir: Path | None = None) -> Iterator[tuple[Cluster, Cluster]]:
    """A running primary and a streaming replica of it; both stopped and removed afterwards."""
    bin_dir = bin_dir or postgres_bin()
    if bin_dir is None:
        raise RuntimeError(f"PostgreSQL server binaries ({', '.join(NEEDED)}) not found")
    _reap_orphans()
    primary: Cluster | None = None
    replica: Cluster | None = None
    try:
        primary = _init_primary(bin_dir)
        replica = _clone_replica(primary)
        wait_until_streaming(primary)
        yield primary, replica
    finally:
        _remove(replica)
        _remove(primary)


def wait_for_replay(primary: Cluster, replica: Cluster, timeout: float = 60) -> None:
    """Wait until the replica has replayed everything the primary has flushed so far."""
    target = primary.sql("SELECT pg_current_wal_flush_lsn()::text")
    deadline = time.monotonic() + timeout
    while not replica.sql(f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn"):
        if time.monotonic() > deadline:
            raise RuntimeError("the replica did not catch up")
        time.sleep(0.05)


def replica_scans(replica: Cluster, database: str = "mnemos") -> int:
    """Scans of `memories` the replica has served (its own statistics)."""
    scans = replica.sql(
        "SELECT coalesce(sum(seq_scan + coalesce(idx_scan, 0)), 0) FROM pg_stat_user_tables"
        " WHERE relname = 'memories'",
        database,
    )
    return int(str(scans))
