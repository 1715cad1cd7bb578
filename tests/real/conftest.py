"""The real servers, shared by the session: the llama.cpp pair (one install, one production server)
and the vLLM pair (one install, one converted model, each engine started once)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from . import vllmpair
from .llamasite import LlamaSite, make_site, unavailable

_VLLM_SITES: list[vllmpair.VllmSite] = []   # the session's vLLM site, to stop after its last test
_LAST_VLLM_TEST: list[pytest.Item] = []   # the item itself: xdist renames node ids after this hook


@pytest.fixture(scope="session")
def llama_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaSite]:
    reason = unavailable()
    if reason is not None:
        if os.environ.get("TALLY_REQUIRE_LLAMA") == "1":
            pytest.fail(f"llama.cpp is required here but unavailable: {reason}")
        pytest.skip(f"llama.cpp unavailable: {reason}")
    site = make_site(tmp_path_factory.mktemp("llamacpp") / "site")
    try:
        yield site
    finally:
        site.stop()


@pytest.fixture(scope="session")
def vllm_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[vllmpair.VllmSite]:
    """The example vLLM site, resident; engines start when a test first asks for them (``site.url(arm)``)."""
    reason = vllmpair.unavailable()
    if reason is not None:
        if os.environ.get("TALLY_REQUIRE_VLLM") == "1":
            pytest.fail(f"vLLM is required here but unavailable: {reason}")
        pytest.skip(f"vLLM unavailable: {reason}")
    site = vllmpair.make_site(tmp_path_factory.mktemp("vllm") / "site")
    _VLLM_SITES.append(site)
    try:
        yield site
    finally:
        site.stop()


@pytest.fixture(scope="session")
def vllm_pair(vllm_site: vllmpair.VllmSite) -> vllmpair.VllmSite:
    """The pair up (plain production and the ngram candidate), routed to production."""
    vllm_site.ensure("plain", "ngram")
    done = vllm_site.script("up", timeout=1200)
    assert done.returncode == 0, done.stderr
    return vllm_site



@pytest.fixture(scope="session")
def vllm_priority(vllm_site: vllmpair.VllmSite) -> vllmpair.VllmSite:
    """The plain engine (vLLM's default fcfs) and a third, ``prio``, the same under ``--scheduling-policy
    priority``: the n-gram engine is stopped for it (never more than two up), so these tests run last."""
    vllm_site.ensure("plain", "prio")
    return vllm_site


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests of the third engine run after the pair's; note the last test that uses the vLLM engines:
    they stop after it (about 10 GB), not at the session's end."""
    third = [item for item in items if "vllm_priority" in getattr(item, "fixturenames", ())]
    items[:] = [item for item in items if item not in third] + third
    users = [item for item in items
             if {"vllm_site", "vllm_pair", "vllm_priority"} & set(getattr(item, "fixturenames", ()))]
    _LAST_VLLM_TEST[:] = users[-1:]


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if _LAST_VLLM_TEST and item is _LAST_VLLM_TEST[0]:
        for site in _VLLM_SITES:
            site.stop()
