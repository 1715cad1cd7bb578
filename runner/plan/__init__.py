"""Plans: a window's registered design, validated from TOML, registered as ``window.registered``.

- ``model``: the frozen values (``Plan``, arms, starts, cells, families, budget) and the
  wave schedule; no I/O;
- ``parse``: a TOML file or the registered JSON into a ``Plan`` (``load_plan``,
  ``parse_plan``), every refusal naming the field;
- ``register``: appending ``window.registered`` and reading a registered plan back.

``docs/plan.md`` is the file format.
"""

from __future__ import annotations

from .model import Plan, WaveSpec, plan_sha256
from .parse import LoadedPlan, load_plan, parse_plan, read_plan_file
from .register import Registration, family_prompts, register_plan, registered, registered_plan, window_log

__all__ = [
    "LoadedPlan",
    "Plan",
    "Registration",
    "WaveSpec",
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
