"""Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``): no driver
package, no port. Opens a page at a given viewport, collects console errors, evaluates JavaScript.

Chromium reads protocol messages (JSON, each ended by a NUL byte) on its fd 3 and writes its
replies and events on fd 4. ``available()`` says why it cannot run here (``None``: it can).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["Browser", "available"]

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--remote-debugging-pipe")


def binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def available() -> str | None:
    return None if binary() else "chromium is not installed (Debian: apt-get install chromium)"


class Browser:
    """One headless Chromium process with a fresh profile, stopped (by its pid) on ``close``."""

    def __init__(self, timeout: float = 120.0) -> None:
        exe = binary()
        if exe is None:
            raise RuntimeError("no chromium")
        self.timeout = timeout
        self.profile = Path(tempfile.mkdtemp(prefix="tally-chromium-"))
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # The child's fd 3 reads what we write; its fd 4 writes what we read.
        os.set_inheritable(to_child_r, True)
        os.set_inheritable(from_child_w, True)

        def _fds() -> None:
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        self.process = subprocess.Popen([exe, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                        preexec_fn=_fds, close_fds=False, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []

    def close(self) -> None:
        for fd in (self._to_child, self._from_child):
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ protocol

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._from_child, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its protocol pipe")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)  # type: ignore[no-any-return]

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})  # type: ignore[no-any-return]
            self.events.append(reply)

    def wait_for(self, method: str, session: str, since: int) -> dict[str, Any]:
        """The first ``method`` event of ``session`` from ``self.events[since:]`` on (read until it comes)."""
        deadline = time.monotonic() + self.timeout
        for event in self.events[since:]:
            if event.get("method") == method and event.get("sessionId") == session:
                return event
        while True:
            event = self._read(deadline)
            self.events.append(event)
            if event.get("method") == method and event.get("sessionId") == session:
                return event

    # ------------------------------------------------------------------ a page

    def open(self, url: str, width: int, height: int) -> str:
        """A new page at ``width`` x ``height`` CSS pixels showing ``url`` (loaded); returns its session id."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": False}, session)
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable", {}, session)
        since = len(self.events)
        self.send("Page.navigate", {"url": url}, session)
        self.wait_for("Page.loadEventFired", session, since)
        return session

    def evaluate(self, session: str, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def console_errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries seen so far."""
        errors = []
        for event in self.events:
            method, params = event.get("method"), event.get("params") or {}
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                errors.append(json.dumps(params.get("args")))
            elif method == "Runtime.exceptionThrown":
                errors.append(json.dumps(params.get("exceptionDetails")))
            elif method == "Log.entryAdded" and (params.get("entry") or {}).get("level") == "error":
                errors.append(json.dumps(params.get("entry")))
        return errors
