"""The stamping transport and the quiet interpreter: the client's own timing machinery."""

from __future__ import annotations

import gc
import sys
import time

import httpcore
import httpx

from runner.measure import transport as transport_module
from runner.measure.interpreter import SWITCH_INTERVAL_S, quiet_interpreter
from runner.measure.transport import StampingStream, StampingTransport, read_time, tls_context
from runner.sim import SimHandle


def test_reads_are_stamped(server: SimHandle) -> None:
    with httpx.Client(transport=StampingTransport(httpx.Limits())) as http:
        before = time.perf_counter()
        with http.stream("POST", f"{server.url}/v1/completions",
                         json={"prompt": "p", "max_tokens": 20, "ignore_eos": True, "stream": True}) as response:
            stream = response.extensions["network_stream"]
            assert isinstance(stream, StampingStream)
            stamps: list[float] = []
            for _ in response.iter_raw():
                stamp = read_time(stream)
                assert stamp is not None and stamp <= time.perf_counter()
                stamps.append(stamp)
    assert before < stamps[0] and stamps == sorted(stamps)
    assert read_time(object()) is None


def test_quiet_interpreter_nests_and_restores() -> None:
    old_interval, old_gc = sys.getswitchinterval(), gc.isenabled()
    sys.setswitchinterval(0.005)
    gc.enable()
    try:
        with quiet_interpreter():
            assert sys.getswitchinterval() == SWITCH_INTERVAL_S and not gc.isenabled()
            with quiet_interpreter():
                pass
            assert not gc.isenabled()  # the inner exit does not restore
        assert sys.getswitchinterval() == 0.005 and gc.isenabled()
    finally:
        sys.setswitchinterval(old_interval)
        if not old_gc:
            gc.disable()


def test_transport_builds_no_tls_context_for_plain_http(server: SimHandle, monkeypatch: object) -> None:
    """A window over plain HTTP never pays for a TLS context: none is built per transport or per request."""
    import ssl

    import pytest

    built: list[object] = []
    real = ssl.create_default_context

    def counting(*args: object, **kwargs: object) -> ssl.SSLContext:
        built.append(args)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    monkeypatch.setattr(transport_module, "_tls", [])
    monkeypatch.setattr(ssl, "create_default_context", counting)
    for _ in range(3):
        with httpx.Client(transport=StampingTransport(httpx.Limits())) as http:
            assert http.get(f"{server.url}/v1/models").status_code == 200
    assert built == []


def test_https_connections_share_one_tls_context(monkeypatch: object) -> None:
    """Every pool's first https connection takes the process's one context, built once."""
    import pytest

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    monkeypatch.setattr(transport_module, "_tls", [])
    made: list[object] = []
    real = httpx.create_ssl_context

    def counting(*args: object, **kwargs: object) -> object:
        made.append(args)
        return real()

    monkeypatch.setattr(httpx, "create_ssl_context", counting)
    contexts = []
    for _ in range(3):
        pool = StampingTransport()._pool
        plain = pool.create_connection(httpcore.Origin(b"http", b"127.0.0.1", 80))
        assert pool._ssl_context is None and plain._ssl_context is None
        secure = pool.create_connection(httpcore.Origin(b"https", b"127.0.0.1", 443))
        contexts.append(secure._ssl_context)
    assert len(made) == 1 and contexts[0] is not None and all(c is contexts[0] for c in contexts)
    assert tls_context() is contexts[0]

