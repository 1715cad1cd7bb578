"""The host-driver interface: actions, their results, and what each result must establish.

A window touches hosts only through a :class:`HostDriver`. Two drivers implement it:
``commands`` (command templates from a site file, :mod:`runner.drivers.commands`) and
``sim`` (the simulator's control API, :mod:`runner.drivers.sim`). Both return an
:class:`ActionResult` whose ``facts`` use one vocabulary (``docs/site.md``), checked
here by :func:`settle` so that the runner can rely on them whichever driver ran.

An action is *site-wide* (``host=None``) or run on one host. The runner calls the
actions of :data:`PER_HOST_ACTIONS` once per host, in site order, and every other
action once, site-wide. A driver never raises for a failed action (``ok=False``,
with ``exit_code`` or ``timed_out``); it raises :class:`~ledger.errors.FormatError`
for a programming or site error (unknown action or host, a missing parameter) and
:class:`~ledger.errors.ExternalError` when it cannot reach anything at all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ledger.errors import FormatError

from ..vocabulary import CounterSourceName

__all__ = [
    "ACTIONS",
    "CHAIN_ACTIONS",
    "CLOSE_ACTIONS",
    "DEFAULT_TIMEOUTS_S",
    "OBSERVING_ACTIONS",
    "OPTIONAL_ACTIONS",
    "PER_HOST_ACTIONS",
    "PLANNED_OPTIONAL_ACTIONS",
    "SERVING_STATES",
    "ActionResult",
    "HostDriver",
    "ServedArm",
    "check_action",
    "served_from_facts",
    "settle",
    "unreachable_allowed",
]

ACTIONS = ("preflight", "drain", "snapshot", "start_arm", "stop_arm", "warmup", "fence", "experiment_stop",
           "quiet_proof", "production_down_proof", "placeholder_up", "placeholder_down", "placeholder_proof",
           "restore", "watch", "read_clock_cap", "probe", "read_thermal", "pair_close", "hold_stash", "commit_close",
           "list_arms", "restore_check")

# Actions that only look at the hosts and change nothing on them. Every other action (a drain, a
# start or stop of an engine, a fence, a placeholder, a restore, and any action added later) may
# change a host: once its start is recorded, the window counts as having touched production.
OBSERVING_ACTIONS = frozenset({"preflight", "probe", "snapshot", "read_clock_cap", "read_thermal", "watch",
                               "quiet_proof", "placeholder_proof", "production_down_proof", "list_arms",
                               "restore_check"})

# Run once per host (host given); every other action is run once, site-wide (host None).
PER_HOST_ACTIONS = frozenset({"fence", "placeholder_up", "placeholder_down", "placeholder_proof"})

# Needed only by chained closes; a command site may leave them out (then it cannot chain).
CHAIN_ACTIONS = frozenset({"fence", "experiment_stop", "quiet_proof", "placeholder_up", "placeholder_down",
                           "placeholder_proof"})

# A site may offer them; the runner uses them when it does (docs/site.md, "Optional actions").
OPTIONAL_ACTIONS = frozenset({"read_thermal", "pair_close", "hold_stash", "commit_close", "list_arms",
                              "restore_check"})
# Optional steps of a chained close, run when the site has them (docs/window.md, the chained close).
CLOSE_ACTIONS = frozenset({"pair_close", "hold_stash", "commit_close"})
# The optional actions the step machine plans with: the close's, and the rollback preflight (a dry
# restore check on production before the drain; a site without one skips it, and hold.opened says so).
PLANNED_OPTIONAL_ACTIONS = CLOSE_ACTIONS | {"restore_check"}

# Seconds an action may take when the site file does not say (docs/site.md).
DEFAULT_TIMEOUTS_S: Mapping[str, float] = {
    "preflight": 60.0, "drain": 900.0, "snapshot": 120.0, "start_arm": 1800.0, "stop_arm": 300.0,
    "warmup": 600.0, "fence": 120.0, "experiment_stop": 300.0, "quiet_proof": 120.0,
    "production_down_proof": 120.0, "placeholder_up": 120.0, "placeholder_down": 120.0,
    "placeholder_proof": 60.0, "restore": 1800.0, "watch": 900.0, "read_clock_cap": 60.0, "probe": 60.0,
    "read_thermal": 60.0, "pair_close": 300.0, "hold_stash": 120.0, "commit_close": 120.0, "list_arms": 60.0,
    "restore_check": 300.0,
}

SERVING_STATES = ("up", "down", "draining")

MAX_SERVED_ARMS = 1000      # arms a site may list (``list_arms``); more is a failure of the action
MAX_ARM_NAME_CHARS = 200

_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class ActionResult:
    """What one host action did: outcome, timing, raw output (kept as blobs) and parsed facts."""

    action: str
    host: str | None
    ok: bool
    exit_code: int | None
    duration_s: float
    timed_out: bool
    stdout: bytes
    stderr: bytes
    facts: dict[str, Any]
    unreachable: bool = False   # the runner could not reach the site at all (the driver raised)

    def summary(self) -> dict[str, Any]:
        """Everything but the raw output (a ``host.action`` payload adds the output blobs)."""
        return {"action": self.action, "host": self.host, "ok": self.ok, "exit_code": self.exit_code,
                "duration_s": self.duration_s, "timed_out": self.timed_out, "facts": dict(self.facts)}


@dataclass(frozen=True)
class ServedArm:
    """An arm a site says ``start_arm`` can start, and what a start of it would report.

    ``config_digest`` and ``speculative_config`` are what the start's facts would say
    (``start_config`` compares them with the arm's declaration); ``None`` for the digest,
    or ``reports_speculative`` false, when the site does not say before starting it.
    """

    name: str
    config_digest: str | None = None
    speculative_config: Mapping[str, Any] | None = None
    reports_speculative: bool = False


@runtime_checkable
class HostDriver(Protocol):
    """One site: its hosts and endpoints, and a way to run each host action."""

    @property
    def kind(self) -> str:
        """``"commands"`` or ``"sim"``."""
        ...

    @property
    def hosts(self) -> tuple[str, ...]:
        """Host names, head first."""
        ...

    @property
    def host_roles(self) -> Mapping[str, str]:
        """Host name -> ``"head"`` | ``"worker"``."""
        ...

    @property
    def serving_url(self) -> str:
        """The OpenAI-compatible base URL the measurement client uses (``http://host:port``)."""
        ...

    @property
    def metrics_urls(self) -> tuple[str, ...]:
        """``/metrics`` URLs to scrape (their counters are summed)."""
        ...

    @property
    def counter_source(self) -> CounterSourceName:
        """Where the server's counters come from: ``vllm`` | ``llamacpp`` | ``sglang`` | ``none`` (docs/measure.md)."""
        ...

    @property
    def production_clock_cap_mhz(self) -> int | None:
        """The GPU clock cap production is configured to run at (``None``: the site has no GPU clocks)."""
        ...

    @property
    def clocks(self) -> bool:
        """Whether GPU clocks apply on this site (a site file may declare ``clocks = false``)."""
        ...

    @property
    def actions(self) -> frozenset[str]:
        """The actions this site can run (a command site may lack :data:`CHAIN_ACTIONS`)."""
        ...

    def served_arms(self) -> Mapping[str, ServedArm] | None:
        """The arms ``start_arm`` can start on this site, by name, when the site can say (``None``: it
        cannot; a simulator lists its configured arms, a command site its ``list_arms`` action's).
        Read before the drain, to refuse a plan it cannot run; ``ExternalError`` when the site
        was asked and could not answer."""
        ...

    def timeout_s(self, action: str) -> float:
        """How long ``action`` may run before it is cut off."""
        ...

    def run(self, action: str, host: str | None, params: Mapping[str, Any]) -> ActionResult:
        """Run ``action`` site-wide (``host=None``) or on ``host``; never raises for a failed action."""
        ...

    def close(self) -> None:
        """Release what the driver holds (connections); it may be used again afterwards."""
        ...


def unreachable_allowed(driver: HostDriver, mode: str) -> tuple[str, ...]:
    """The hosts a window of ``mode`` may find unreachable while it holds them (the site's
    ``allow_unreachable`` table, mode -> hosts; none by default)."""
    table = getattr(driver, "allow_unreachable", None)
    return tuple(table.get(mode, ())) if isinstance(table, Mapping) else ()


def check_action(driver: HostDriver, action: str, host: str | None) -> None:
    """Refuse (``FormatError``) an action the driver does not know or a host the site does not have."""
    if action not in ACTIONS:
        raise FormatError(f"unknown host action {action!r}; actions: {', '.join(ACTIONS)}")
    if action not in driver.actions:
        raise FormatError(f"this {driver.kind} site has no {action!r} action (add [actions.{action}] to the site)")
    if host is not None and host not in driver.hosts:
        raise FormatError(f"unknown host {host!r} for action {action}; site hosts: {', '.join(driver.hosts)}")


# ---------------------------------------------------------------------- facts

# Facts an action implies when it succeeds and does not say otherwise.
_IMPLIED: Mapping[str, Mapping[str, Any]] = {
    "drain": {"serving": "down"},
    "production_down_proof": {"serving": "down"},
    "quiet_proof": {"quiet": True},
    "restore": {"serving": "up"},
    "watch": {"watch": "PASS"},
}

# Facts an action must establish to count as a success.
_REQUIRED: Mapping[str, tuple[str, ...]] = {
    "preflight": ("serving",),
    "probe": ("serving",),
    "snapshot": ("snapshot_sha256",),
    "read_clock_cap": ("clock_cap_mhz",),
    "warmup": (),
    "watch": ("watch",),
    "list_arms": ("arms",),
    "restore_check": ("snapshot_sha256",),
}


def _fact_problem(name: str, value: Any) -> str | None:
    """Why a known fact has the wrong shape (``None`` when it is fine or not a known fact)."""
    if name == "serving" and value not in SERVING_STATES:
        return f"serving must be one of {', '.join(SERVING_STATES)}, got {value!r}"
    if name == "watch" and value not in ("PASS", "FAIL"):
        return f"watch must be PASS or FAIL, got {value!r}"
    if name in ("clock_cap_mhz", "current_clock_mhz") and value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        return f"{name} must be a positive integer, got {value!r}"
    if name in ("snapshot_sha256", "production_sha256") and value is not None and (
            not isinstance(value, str) or not _HEX64.fullmatch(value)):
        return f"{name} must be 64 lowercase hex characters, got {value!r}"
    if name in ("ttft_cold_s", "ttft_warm_s") and (
            isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
        return f"{name} must be a non-negative number of seconds, got {value!r}"
    if name in ("placeholders", "fenced") and (
            not isinstance(value, list) or not all(isinstance(h, str) for h in value)):
        return f"{name} must be a list of host names, got {value!r}"
    if name == "arms":
        return _arms_problem(value)
    if name == "quiet" and not isinstance(value, bool):
        return f"quiet must be true or false, got {value!r}"
    if name in ("arm", "role", "engine", "log_line", "commit", "worker_identity", "markov_identity",
                "experiment_commit", "worker_tree", "tag", "tag_commit") and value is not None \
            and not isinstance(value, str):
        return f"{name} must be a string or null, got {value!r}"
    return None


def _arms_problem(value: Any) -> str | None:
    """Why a ``list_arms`` ``arms`` fact has the wrong shape: an object, arm name -> an object whose
    members (all optional) are ``config_digest`` (64 hex) and ``speculative_config`` (an object or null)."""
    if not isinstance(value, dict):
        return f"arms must be an object of arm name -> what a start of it reports, got {type(value).__name__}"
    if len(value) > MAX_SERVED_ARMS:
        return f"arms lists {len(value)} arms, more than {MAX_SERVED_ARMS}"
    for name, arm in value.items():
        shown = repr(name[:MAX_ARM_NAME_CHARS])
        if not name or len(name) > MAX_ARM_NAME_CHARS:
            return f"arms: an arm name must have 1 to {MAX_ARM_NAME_CHARS} characters, got {shown}"
        if not isinstance(arm, dict):
            return f"arms: arm {shown} must be an object (config_digest, speculative_config), got {arm!r:.80}"
        unknown = sorted(set(arm) - {"config_digest", "speculative_config"})
        if unknown:
            return f"arms: arm {shown} has unknown members {', '.join(unknown)[:200]}"
        digest = arm.get("config_digest")
        if digest is not None and (not isinstance(digest, str) or not _HEX64.fullmatch(digest)):
            return f"arms: arm {shown}: config_digest must be 64 lowercase hex characters, got {digest!r:.80}"
        spec = arm.get("speculative_config")
        if spec is not None and not isinstance(spec, dict):
            return f"arms: arm {shown}: speculative_config must be an object or null, got {spec!r:.80}"
    return None


def served_from_facts(value: Any) -> dict[str, ServedArm]:
    """The arms a ``list_arms`` ``arms`` fact lists (``FormatError`` naming the problem when malformed)."""
    problem = _arms_problem(value)
    if problem is not None:
        raise FormatError(problem)
    return {name: ServedArm(name, arm.get("config_digest"), arm.get("speculative_config"),
                            "speculative_config" in arm)
            for name, arm in value.items()}


def settle(action: str, host: str | None, params: Mapping[str, Any], ok: bool,
           facts: Mapping[str, Any]) -> tuple[bool, dict[str, Any]]:
    """The final ``(ok, facts)`` of an action from what the driver saw.

    Pure. Adds the facts a success implies, checks the shape of every known fact,
    requires the facts the action exists to establish, and turns a success whose
    facts contradict the action (a drain that left production up, a restore to
    another snapshot, a watch that says FAIL, a proof that names no placeholder on
    its host) into a failure; the reason goes to ``facts["error"]``.
    """
    out = dict(facts)
    problems: list[str] = []
    if ok:
        for name, value in _IMPLIED.get(action, {}).items():
            out.setdefault(name, value)
    elif action == "watch":
        out.setdefault("watch", "FAIL")
    for name, value in out.items():
        problem = _fact_problem(name, value)
        if problem is not None:
            problems.append(problem)
    if ok:
        missing = [name for name in _REQUIRED.get(action, ()) if out.get(name) is None]
        if missing:
            problems.append(f"{action} reported success but established no {', '.join(missing)}")
        problems += _contradictions(action, host, params, out)
    if problems:
        ok = False
        earlier = out.get("error")
        out["error"] = "; ".join(([earlier] if isinstance(earlier, str) and earlier else []) + problems)
    return ok, out


def _tag_problems(host: str, tag: str, commit: Any, facts: Mapping[str, Any]) -> list[str]:
    """A chained start's tag check: ``tag`` checked out on ``host``, pointing at the window's ``commit``."""
    have, points = facts.get("tag"), facts.get("tag_commit")
    if have is None:
        return [f"{host} reports no tag checked out, not the window's tag {tag}"]
    if have != tag:
        return [f"{host} has tag {str(have)[:200]} checked out, not the window's tag {tag}"]
    if points is None:
        return [f"{host} does not report the commit its tag {tag} points at"]
    if isinstance(commit, str) and points != commit:
        return [f"tag {tag} on {host} points at commit {str(points)[:64]}, not the window's {commit}"]
    return []


def _contradictions(action: str, host: str | None, params: Mapping[str, Any], facts: Mapping[str, Any]) -> list[str]:
    problems = []
    serving = facts.get("serving")
    if action in ("drain", "production_down_proof", "experiment_stop") and serving not in (None, "down"):
        problems.append(f"{action} left production {serving}")
    if action in ("restore", "watch") and serving not in (None, "up"):
        problems.append(f"{action} found production {serving}")
    if action == "watch" and facts.get("watch") == "FAIL":
        problems.append("watch said FAIL")
    wanted = params.get("snapshot_sha256")
    got = facts.get("snapshot_sha256")
    if action == "restore" and wanted is not None and got is not None and got != wanted:
        problems.append(f"restored snapshot {got} is not the requested {wanted}")
    if action == "restore_check" and wanted is not None and got is not None and got != wanted:
        problems.append(f"the restore would bring back snapshot {got}, not production's {wanted}")
    placeholders = facts.get("placeholders")
    if isinstance(placeholders, list) and host is not None:
        if action in ("placeholder_up", "placeholder_proof") and host not in placeholders:
            problems.append(f"no placeholder on {host} after {action}")
        if action == "placeholder_down" and host in placeholders:
            problems.append(f"placeholder still up on {host} after {action}")
    expected, commit = params.get("expected_commit"), facts.get("commit")
    if action == "placeholder_proof" and isinstance(expected, str) and commit is not None and commit != expected:
        problems.append(f"{host or 'the site'} runs commit {str(commit)[:40]}, not the window's {expected}")
    tag = params.get("expected_tag")
    if action == "placeholder_proof" and isinstance(tag, str):
        problems += _tag_problems(host or "the site", tag, expected, facts)
    if action == "quiet_proof" and facts.get("quiet") is False:
        problems.append("hosts are not quiet")
    return problems
