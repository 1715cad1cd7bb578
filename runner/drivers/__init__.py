"""Host drivers: one interface (:class:`HostDriver`) for a real site and for the simulator.

``load_site(path)`` reads a site file and returns the driver it describes;
``SimDriver.for_handle(handle)`` drives a simulator started in this process. See
``docs/site.md`` for the actions, their facts and the site file format.
"""

from __future__ import annotations

from .base import (
    ACTIONS,
    CHAIN_ACTIONS,
    CLOSE_ACTIONS,
    DEFAULT_TIMEOUTS_S,
    OBSERVING_ACTIONS,
    PER_HOST_ACTIONS,
    PLANNED_OPTIONAL_ACTIONS,
    SERVING_STATES,
    ActionResult,
    HostDriver,
    check_action,
    settle,
    unreachable_allowed,
)
from .commands import CommandsDriver, CommandTemplate, parse_facts, parse_template
from .sim import SimDriver
from .site import load_site, site_from_dict, site_time_scale

__all__ = [
    "ACTIONS",
    "CHAIN_ACTIONS",
    "CLOSE_ACTIONS",
    "DEFAULT_TIMEOUTS_S",
    "OBSERVING_ACTIONS",
    "PER_HOST_ACTIONS",
    "PLANNED_OPTIONAL_ACTIONS",
    "SERVING_STATES",
    "ActionResult",
    "CommandTemplate",
    "CommandsDriver",
    "HostDriver",
    "SimDriver",
    "check_action",
    "load_site",
    "parse_facts",
    "parse_template",
    "settle",
    "site_from_dict",
    "site_time_scale",
    "unreachable_allowed",
]
