"""The real servers, shared by the session: the llama.cpp pair (one install, one production server)
and the vLLM pair (one install, one converted model, each engine started once)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from . import vllmpair
from .llamasite import LlamaSite, make_site, unavailable


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

