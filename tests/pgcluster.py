"""A throwaway PostgreSQL 15 cluster on 127.0.0.1, run as an unprivileged user.

PostgreSQL refuses to run as root, so when the tests run as root the cluster is
initialised and started as the ``postgres`` user (``runuser``). The data directory is
a temporary directory removed by ``stop()``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def available() -> str | None:
    """None if a cluster can be started here, else the reason it cannot."""
    for tool in ("initdb", "pg_ctl", "postgres"):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run the server"
        if shutil.which("runuser") is None:
            return "running as root and runuser is missing"
    return None


SHARED = "TALLY_TEST_PG"
"""The environment variable by which the test session's controller hands its workers the cluster it
started (``port:directory``): one cluster per session, whatever the number of workers."""


class Cluster:
    def __init__(self, directory: Path | None = None, port: int | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="tally-pg-")) if directory is None else directory
        self.data = self.dir / "data"
        self.port = _free_port() if port is None else port
        self.user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        self._counter = 0

    @classmethod
    def shared(cls) -> Cluster | None:
        """The cluster this session's controller started for its workers (``SHARED``), if any."""
        value = os.environ.get(SHARED)
        if not value:
            return None
        port, _, directory = value.partition(":")
        return cls(Path(directory), int(port))

    def handle(self) -> str:
        """What ``SHARED`` holds for this cluster."""
        return f"{self.port}:{self.dir}"

    def _run(self, *args: str) -> None:
        command = list(args)
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def start(self) -> Cluster:
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", self.user, "--auth=trust", "-E", "UTF8",
                  "--locale=C")
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                   "-c max_connections=200")
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.dir / "log"),
                  "-w", "-t", "60", "start")
        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(self.dsn("postgres"), connect_timeout=2):
                    return self
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def dsn(self, database: str) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/{database}"

    def new_database(self, prefix: str = "t") -> str:
        """A fresh empty database; returns its SQLAlchemy URL."""
        self._counter += 1
        name = f"{prefix}_{os.getpid()}_{self._counter}"
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        except subprocess.CalledProcessError:
            pass
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
