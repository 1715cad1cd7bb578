"""The real llama.cpp pair, shared by the session (one install, one production server)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

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
