"""Plans: a window's registered design, validated from TOML, registered as ``window.registered``.

::

    from runner.plan import read_plan_file, register_plan, registered_plan

    loaded = read_plan_file(Path("plan.toml"))        # every refusal names the field (exit 2)
    register_plan(ledger, signer, loaded)             # window.registered (once; the same plan again is a no-op)
    registered_plan(ledger, loaded.plan.window_id).plan

- ``model``: the frozen values (``Plan``, arms, starts, cells, families, budget) and the
  wave schedule; no I/O;
- ``parse``: a TOML file or the registered JSON into a ``Plan`` (``load_plan``,
  ``parse_plan``), every refusal naming the field;
- ``register``: appending ``window.registered`` and reading a registered plan back.

``docs/plan.md`` is the file format.
"""

from __future__ import annotations

from .model import (
    CONTROL_ROLE,
    MODES,
    SMOKE_FAILURE_KIND,
    SMOKE_SCHEMA,
    Arm,
    Budget,
    Carry,
    Plan,
    Power,
    Pressure,
    Smoke,
    WaveSpec,
    plan_sha256,
)
from .parse import LoadedPlan, load_plan, parse_plan, read_plan_file
from .register import (
    Registration,
    WindowNotRegistered,
    family_prompts,
    register_plan,
    registered,
    registered_plan,
    window_log,
)

__all__ = [
    "CONTROL_ROLE",
    "MODES",
    "SMOKE_FAILURE_KIND",
    "SMOKE_SCHEMA",
    "Arm",
    "Budget",
    "Carry",
    "LoadedPlan",
    "Plan",
    "Power",
    "Pressure",
    "Registration",
    "Smoke",
    "WaveSpec",
    "WindowNotRegistered",
    "family_prompts",
    "load_plan",
    "parse_plan",
    "plan_sha256",
    "read_plan_file",
    "register_plan",
    "registered",
    "registered_plan",
    "window_log",
]
