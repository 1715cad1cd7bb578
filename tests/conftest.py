"""Shared fixtures: one throwaway PostgreSQL cluster per session, ledgers, signers, and the installed wheel
with its one run of each demo scenario per session (``tests/demo_runs.py``).

PostgreSQL tests skip (with the reason) when no server can be started here, unless
``TALLY_REQUIRE_POSTGRES=1`` (set by ``.ci/run``), which turns that into a failure.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from ledger.keys import Signer
from ledger.store import Ledger

from . import pgcluster
from .demo_runs import DemoRuns, install_wheel

settings.register_profile("ci", max_examples=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=20, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=500, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# Tests send SIGINT to the commands they start (`tally measure`, `tally window run`) and check what they do
# with it. A test session started in the background of a non-interactive shell (`make test &`, nohup)
# inherits SIGINT ignored, and every child would inherit that too: Python then keeps SIGINT ignored and the
# Ctrl-C under test never arrives. The session takes Python's own handler back, so that its children start
# with the default disposition as they do from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _workers(config: pytest.Config) -> int:
    """How many xdist workers this session runs (0: none, the tests run in this process)."""
    return int(getattr(config.option, "numprocesses", 0) or 0)


def pytest_configure(config: pytest.Config) -> None:
    """Under xdist the controller starts the session's one PostgreSQL cluster and hands it to its workers
    (``pgcluster.SHARED``, in the environment they inherit); each worker makes its own databases in it."""
    if _workers(config) and not hasattr(config, "workerinput") and pgcluster.available() is None:
        cluster = pgcluster.Cluster()
        try:
            cluster.start()
        except Exception:   # the workers try again themselves, and fail or skip with the reason
            cluster.stop()
            return
        config.stash[_CLUSTER] = cluster
        os.environ[pgcluster.SHARED] = cluster.handle()


def pytest_unconfigure(config: pytest.Config) -> None:
    cluster = config.stash.get(_CLUSTER, None)
    if cluster is not None:
        os.environ.pop(pgcluster.SHARED, None)
        cluster.stop()


_CLUSTER = pytest.StashKey[pgcluster.Cluster]()
WHEEL_FILES = ("tests/test_packaging.py", "tests/test_readme.py")
"""The files whose tests use the installed wheel (``installed_wheel``, ``demo_runs``): one worker, one install."""


def worker_group(nodeid: str) -> str:
    """The worker group of a test (``make test`` runs two xdist workers): every real server's test in one
    (one llama.cpp pair and one vLLM pair per session, at most two servers up at once), the installed wheel's in
    one, and each other file's tests together (its module fixtures run once)."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/real/"):
        return "real"
    return "wheel" if path in WHEEL_FILES else path


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Whole groups (``worker_group``) to a worker, the longest first (xdist's ``loadgroup`` marks do not reach
    pytest 9's node ids, so the grouping is the scheduler's own)."""
    from xdist.scheduler import LoadScopeScheduling

    class Groups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

    return Groups(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist the real servers' tests come first, then the wheel's: the longest group starts at once (the
    scheduler hands out groups in collection order)."""
    if not _workers(config) and not hasattr(config, "workerinput"):
        return
    rank = {"real": 0, "wheel": 1}
    items.sort(key=lambda item: rank.get(worker_group(item.nodeid), 2))


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[pgcluster.Cluster]:
    shared = pgcluster.Cluster.shared()
    if shared is not None:
        yield shared   # the controller's: it stops it
        return
    reason = pgcluster.available()
    if reason is not None:
        if os.environ.get("TALLY_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL is required here but unavailable: {reason}")
        pytest.skip(f"PostgreSQL unavailable: {reason}")
    cluster = pgcluster.Cluster()
    try:
        cluster.start()
    except Exception as exc:
        cluster.stop()
        if os.environ.get("TALLY_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL is required here but did not start: {exc}")
        pytest.skip(f"PostgreSQL did not start: {exc}")
    yield cluster
    cluster.stop()


@pytest.fixture
def pg_url(pg_cluster: pgcluster.Cluster) -> str:
    """A fresh, empty PostgreSQL database."""
    return pg_cluster.new_database()


@pytest.fixture(params=["sqlite-memory", "sqlite-file", "postgres"])
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each storage backend in turn (the storage contract)."""
    if request.param == "sqlite-memory":
        return "sqlite://"
    if request.param == "sqlite-file":
        return f"sqlite:///{tmp_path / 'tally.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def root() -> Signer:
    return Signer.generate("root")


@pytest.fixture
def ledger(tmp_path: Path, root: Signer) -> Iterator[Ledger]:
    """A fresh SQLite-file ledger whose genesis names ``root``."""
    book = Ledger(f"sqlite:///{tmp_path / 'tally.db'}")
    book.init("tally.test/ledger", root)
    yield book
    book.close()


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from the package's sources, installed in a fresh virtualenv (one per session)."""
    return install_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def demo_runs(installed_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoRuns]:
    """The installed wheel's ``tally demo`` runs, each scenario at most once per session, from outside the checkout."""
    runs = DemoRuns(installed_wheel, tmp_path_factory.mktemp("elsewhere"))
    yield runs
    runs.close()
