"""A throwaway OpenSSH server on 127.0.0.1 for the remote-shell tests (Debian's openssh-server).

:func:`local_sshd` starts ``sshd -D`` as a child with its own host key, authorized key and
config in a temporary directory, on a free port, waits until it accepts connections, and
stops it by its pid on exit. It yields an :class:`Sshd` with an ssh client config file
(``ssh -F CONFIG any-host-name``: every name connects there, with that key, checking the
host key against the one it made). Without ``sshd`` here the tests skip with the reason,
unless ``TALLY_REQUIRE_SSH=1`` (``.ci/run``), which makes that a failure.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")
HOST_ALIAS = "tally-test-sshd"


@dataclass(frozen=True)
class Sshd:
    port: int
    config: Path          # the client's ssh config (-F)
    pid: int


def _unavailable(reason: str) -> None:
    if os.environ.get("TALLY_REQUIRE_SSH") == "1":
        pytest.fail(f"an OpenSSH server is required here (TALLY_REQUIRE_SSH=1) but {reason}")
    pytest.skip(f"no local OpenSSH server: {reason} (apt-get install openssh-server)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "tally-test", "-f", str(path)], check=True,
                   capture_output=True, timeout=30)


@contextmanager
def local_sshd(directory: Path) -> Iterator[Sshd]:
    sshd = next((c for c in SSHD_CANDIDATES if os.access(c, os.X_OK)), shutil.which("sshd"))
    if sshd is None or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        _unavailable("sshd, ssh or ssh-keygen is not installed")
    assert sshd is not None
    if os.geteuid() == 0 and not Path("/run/sshd").is_dir():
        Path("/run/sshd").mkdir(mode=0o755, parents=True)  # sshd's privilege separation directory (as root)
    directory.mkdir(parents=True, exist_ok=True)
    host_key, user_key = directory / "host_key", directory / "user_key"
    _keygen(host_key)
    _keygen(user_key)
    (directory / "authorized_keys").write_text(user_key.with_suffix(".pub").read_text())
    (directory / "authorized_keys").chmod(0o600)
    port = _free_port()
    user = getpass.getuser()
    (directory / "sshd_config").write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}", f"PidFile {directory / 'sshd.pid'}",
        f"AuthorizedKeysFile {directory / 'authorized_keys'}", "PubkeyAuthentication yes",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
        "PermitRootLogin prohibit-password", f"AllowUsers {user}", "AcceptEnv TALLY_*", "LogLevel ERROR", ""]))
    (directory / "known_hosts").write_text(f"{HOST_ALIAS} {host_key.with_suffix('.pub').read_text()}")
    config = directory / "ssh_config"
    config.write_text("\n".join([
        "Host *", "  HostName 127.0.0.1", f"  Port {port}", f"  User {user}", f"  IdentityFile {user_key}",
        "  IdentitiesOnly yes", "  IdentityAgent none", "  BatchMode yes", f"  HostKeyAlias {HOST_ALIAS}",
        f"  UserKnownHostsFile {directory / 'known_hosts'}", "  StrictHostKeyChecking yes",
        "  GlobalKnownHostsFile /dev/null", "  LogLevel ERROR", "  ConnectTimeout 10", ""]))
    checked = subprocess.run([sshd, "-t", "-f", str(directory / "sshd_config")], capture_output=True, text=True,
                             timeout=30)
    if checked.returncode != 0:
        _unavailable(f"sshd refuses its test config: {checked.stderr.strip()[:300]}")
    log = (directory / "sshd.log").open("wb")
    process = subprocess.Popen([sshd, "-D", "-e", "-f", str(directory / "sshd_config")], stdout=log,
                               stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            if process.poll() is not None:
                _unavailable(f"sshd exited at once: {(directory / 'sshd.log').read_text()[:300]}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    _unavailable("sshd did not listen within 20 s")
                time.sleep(0.05)
        yield Sshd(port, config, process.pid)
    finally:
        process.terminate()  # by its pid: the one process this helper started
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        log.close()
