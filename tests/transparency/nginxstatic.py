"""A real static web server (nginx from Debian) on 127.0.0.1 serving a directory; stopped by its pid.

Skips with the reason when nginx is not installed, unless ``TALLY_REQUIRE_NGINX=1``
(``.ci/run`` installs it and sets that), where its absence fails the test.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from .witnesshttp import free_port

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)


def require_nginx() -> str:
    if NGINX is None:
        if os.environ.get("TALLY_REQUIRE_NGINX") == "1":
            pytest.fail("nginx is required (TALLY_REQUIRE_NGINX=1) but not installed")
        pytest.skip("nginx is not installed (apt-get install nginx-light; .ci/run does)")
    return NGINX


@contextmanager
def serve_static(root: Path, work: Path) -> Iterator[str]:
    """nginx serving ``root`` at http://127.0.0.1:<port>; its own config, pid file and logs under ``work``."""
    nginx = require_nginx()
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    user = "user root;\n" if os.geteuid() == 0 else ""  # workers read files under pytest's 0700 tmp dirs
    conf = work / "nginx.conf"
    conf.write_text(f"""{user}daemon off;
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {work}/body;
    proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi;
    uwsgi_temp_path {work}/uwsgi;
    scgi_temp_path {work}/scgi;
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location = /checkpoint {{ default_type "text/plain; charset=utf-8"; add_header Cache-Control "no-cache"; }}
        location /tile/ {{ add_header Cache-Control "max-age=31536000, immutable"; }}
    }}
}}
""")
    proc = subprocess.Popen([nginx, "-p", str(work), "-c", str(conf), "-e", str(work / "error.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        end = time.monotonic() + 20
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"nginx exited {proc.returncode}: {proc.stderr.read().decode() if proc.stderr else ''}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if time.monotonic() > end:
                    raise RuntimeError("nginx did not listen in time") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.kill(proc.pid, signal.SIGQUIT)  # graceful stop of the master (and its worker), by pid
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
