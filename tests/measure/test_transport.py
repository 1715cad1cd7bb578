"""The stamping transport and the quiet interpreter: the client's own timing machinery."""

from __future__ import annotations

import gc
import sys
import time

import httpx

from runner.measure.interpreter import SWITCH_INTERVAL_S, quiet_interpreter
from runner.measure.transport import StampingStream, StampingTransport, read_time
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
