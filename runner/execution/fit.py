"""Does the site fit the window? What can be known before the first host action, found out then.

A window is refused, before it drains anything, when the site it would run on cannot give
its rule what the rule needs: a plan and a site that disagree on GPU clocks, a server that
does not answer its model list or serves a context too short for a cell's prompt plus
``max_tokens``, a win2-v1 window on a server whose metrics endpoint is
absent (the rule decides on engine round counters). ``tally window run --dry-run`` prints
the same refusals; ``--execute`` raises the first as one ``PolicyError`` line, before any
host action is recorded. The probes are read-only requests to production's serving and
metrics endpoints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx

from ledger.errors import PolicyError

from ..events import payloads, read_payload
from ..gates import spec_reported

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from ledger.store import Ledger

    from ..drivers.base import HostDriver
    from ..plan.model import Plan

__all__ = [
    "PROBE_TIMEOUT_S", "arm_refusals", "context_refusals", "probe_refusals", "recorded_fields", "refuse_unfit",
    "site_refusals", "unfit",
]

PROBE_TIMEOUT_S = 10.0


def site_refusals(plan: Plan, driver: HostDriver) -> list[str]:
    """What the plan and the site file disagree on (no request sent)."""
    from ..measure.sources import counter_source

    refusals: list[str] = []
    source = counter_source(driver.counter_source)
    if plan.protocol == "win2-v1" and not source.counts_rounds:
        refusals.append(f"win2-v1 decides on engine round counters, and the site's counter source "
                        f"{source.name!r} ({source.label}) cannot count a speculative arm's rounds")
    guard = plan.decision.get("guard", "round_ms_p95")
    if plan.protocol == "pp3-v1" and guard == "round_ms_p95" and not source.chunks_are_steps:
        refusals.append(f"pp3-v1's guard compares p95 round time, but on a {source.label} server (counter source "
                        f"{source.name!r}) a streamed chunk is not an engine step: register the per-token figure "
                        'instead (guard = "tpot_ms" under [decision])')
    if plan.production_clock_cap_mhz is None and driver.clocks:
        refusals.append(f"the plan registers no production clock cap, but the {driver.kind} site has GPU clocks "
                        f"(production_clock_cap_mhz {driver.production_clock_cap_mhz}): register the cap, or "
                        "declare clocks = false in the site file if the hosts have none")
    elif plan.production_clock_cap_mhz is not None and not driver.clocks:
        refusals.append(f"the plan registers production_clock_cap_mhz {plan.production_clock_cap_mhz}, but the site "
                        "declares clocks = false: leave the cap out of the plan on a site without GPU clocks")
    elif plan.production_clock_cap_mhz is not None and driver.production_clock_cap_mhz is not None \
            and plan.production_clock_cap_mhz != driver.production_clock_cap_mhz:
        refusals.append(f"the plan registers production_clock_cap_mhz {plan.production_clock_cap_mhz} (the expected "
                        f"cap), but the site configures production at {driver.production_clock_cap_mhz} MHz: the "
                        "control starts would not run production's clocks")
    return refusals


def probe_refusals(plan: Plan, driver: HostDriver) -> list[str]:
    """What production's serving and metrics endpoints say the window cannot get (read-only requests)."""
    from ..measure.sources import counter_source
    from ..measure.transport import StampingTransport
    from ..measure.wave import scrape_metrics, served_models

    refusals: list[str] = []
    models = served_models(driver.serving_url, timeout_s=PROBE_TIMEOUT_S)  # ExternalError when it does not answer
    if not models:
        refusals.append(f"{driver.serving_url}/v1/models lists no model: the measurement client has nothing to ask")
    else:  # the waves ask the first model listed
        refusals += context_refusals(plan, models[0].id, models[0].max_model_len)
    source = counter_source(driver.counter_source)
    needed = plan.pressure.gauges if plan.pressure is not None else ()
    if needed and not (source.scrapes and driver.metrics_urls):
        refusals.append(f"the plan's [pressure] limits read the server's {' and '.join(needed)} gauge, and the "
                        f"site's counter source {source.name!r} scrapes no metrics endpoint")
    rounds = plan.protocol == "win2-v1"
    if not source.scrapes or not (needed or rounds):
        return refusals
    with httpx.Client(transport=StampingTransport()) as http:   # one scrape per URL serves both checks
        for url in driver.metrics_urls:
            scrape = scrape_metrics(http, url, PROBE_TIMEOUT_S)
            snapshot = scrape.snapshot
            if snapshot is None:
                if needed:
                    refusals.append(f"the plan's [pressure] limits read the server's gauges, and {scrape.problem}")
                if rounds:
                    refusals.append(f"win2-v1 decides on the server's engine round counters, and {scrape.problem}")
                continue
            unread = [g for g in needed if not any(snapshot.has(s) for s in source.gauge_series.get(g, ()))]
            if unread:
                series = ", ".join(s for g in unread for s in source.gauge_series.get(g, ())) or "none known"
                refusals.append(f"the plan's [pressure] limits read the {' and '.join(unread)} gauge, and {url} "
                                f"exposes no series a {source.label} source reads it from ({series})")
            check = source.check(snapshot) if rounds else None
            if check is not None and not check.spec_off_rounds and not check.speculative_rounds:
                refusals.append(f"win2-v1 decides on engine round counters, and {url} has none a "
                                f"{source.label} source reads: " + "; ".join(check.reasons))
    return refusals


def context_refusals(plan: Plan, model: str, max_model_len: int | None) -> list[str]:
    """What would not fit the server's context (nothing when the server does not say): the rule each
    start's attestation applies to its own engine (:func:`runner.gates.context_problems`). The probe is
    production's; an arm's engine with another context is found at its start, before its warm-up."""
    from ..gates import context_problems

    return context_problems(plan, model, max_model_len)


def recorded_fields(ledger: Ledger, window: str) -> dict[str, Any] | None:
    """What the window's last recorded capability probe (the rehearsal gate) found of each field."""
    fields = None
    for event in ledger.events(stream=f"window/{window}", types=["gate.result"]):
        gate = read_payload(event, payloads.GateResult)
        if gate.gate == "rehearsal":
            found = (gate.evidence or {}).get("fields")
            fields = dict(found) if isinstance(found, dict) else fields
    return fields


def unfit(plan: Plan, driver: HostDriver, *, production_serves: bool = True,
          fields: Mapping[str, Any] | None = None) -> list[str]:
    """Every reason the window cannot run on this site (static checks first; probes only when those pass).

    Production is probed only when it serves: under another window's chain marker it is
    down, and the static checks are all there is to know. ``fields`` (the recorded
    capability probe's finding per request field) refuses smoke probes the server cannot run.
    """
    from ..rehearsal.capability import engine_refusals, smoke_refusals

    static = site_refusals(plan, driver) + smoke_refusals(plan, fields) + engine_refusals(plan, fields)
    if static:
        return static
    arms = arm_refusals(plan, driver)   # asked of the site, not of production: also under a chain marker
    return arms or (probe_refusals(plan, driver) if production_serves else [])


def arm_refusals(plan: Plan, driver: HostDriver) -> list[str]:
    """The plan's arms the site says it cannot start as declared (nothing when the site cannot say).

    A start of an arm the site does not serve fails only after the drain and the HOLD (the
    simulator answers ``unknown arm``), and so does a start whose reported config digest or
    speculative config is not the arm's declared one (``start_config``): the window would be
    used up restoring. The simulator lists its arms and what their starts report; a command
    site does when it has a ``list_arms`` action. ``tally sim config --plan PLAN`` writes a
    simulator config serving exactly a plan's arms.
    """
    served = driver.served_arms()
    if served is None:
        return []
    hint = ("`tally sim config --plan PLAN.toml` writes a simulator config serving the plan's arms"
            if driver.kind == "sim" else "the site's list_arms command says what its start_arm can start")
    missing = [arm.name for arm in plan.arms if arm.name not in served]
    refusals = []
    if missing:
        names = list(served)
        serves = (f"it serves {', '.join(repr(s) for s in names[:20])}{' ...' if len(names) > 20 else ''}"
                  if names else "it lists no arm")
        refusals.append(f"the {driver.kind} site serves no arm named {', '.join(repr(m) for m in missing)} "
                        f"({serves}): a start of {'it' if len(missing) == 1 else 'them'} would fail after the "
                        f"drain; {hint}")
    for arm in plan.arms:
        site = served.get(arm.name)
        if site is None:
            continue
        if site.config_digest is not None and site.config_digest != arm.config_digest:
            refusals.append(f"arm {arm.name!r} declares config_digest {arm.config_digest[:16]}..., but the site "
                            f"says a start of it reports {site.config_digest[:16]}...: start_config would fail "
                            "after the drain (register the digest the site reports, or fix the site's arm)")
        runs_spec = spec_reported(site.speculative_config)   # start_config's own rule
        if site.reports_speculative and runs_spec != arm.speculates:
            refusals.append(f"arm {arm.name!r} declares " + ("speculative decoding" if arm.speculates else
                                                              'speculative = "none"')
                            + ", but the site says a start of it runs " + ("speculative decoding" if runs_spec else
                                                                           "none")
                            + ": start_config would fail after the drain")
    return refusals


def refuse_unfit(plan: Plan, driver: HostDriver, *, production_serves: bool = True,
                 fields: Mapping[str, Any] | None = None) -> None:
    """Raise ``PolicyError`` (one line) when the window cannot run on this site."""
    reasons = unfit(plan, driver, production_serves=production_serves, fields=fields)
    if reasons:
        raise PolicyError(f"window {plan.window_id} refused before any host action: " + "; ".join(reasons))
