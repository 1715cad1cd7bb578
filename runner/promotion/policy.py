"""A promotion policy (``docs/promotion.md``): what a decision receipt must show for a promotion to proceed.

A TOML file read as hostile input (``ledger.stricttoml``, bounded) through the one field
reader, every refusal naming the member. Tables: ``[trust]`` (the log's vkeys, the
witnesses and how many must cosign), ``[measurement]`` (rule, modes, metric set, the
decision cells, recorded fields), ``[qualification]`` (the gates that must have admitted
the window, the RNG test set), ``[clocks]``, ``[archive]`` and ``[looks]`` (the error budget
over a candidate's looks: ``runner.decide.spending``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from ledger.errors import FieldError, FormatError
from ledger.note import Verifier, parse_vkey
from ledger.stricttoml import read_toml

from ..decide.spending import SPENDINGS, LookBudget
from ..fields import Fields
from ..plan.model import MODES
from ..vocabulary import GATES

__all__ = ["MAX_POLICY_BYTES", "PromotionPolicy", "read_policy"]

MAX_POLICY_BYTES = 1 << 20
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_METRIC = re.compile(r"[a-z][a-z0-9_]{0,63}")
_FIELD_PATH = re.compile(r"(input|result|params)(\.[A-Za-z0-9_-]{1,64}){0,8}")
_TEST_ID = re.compile(r"[!-~]{1,300}")
MAX_LOOKS = 1000
_RULES = ("win2-v1",)  # the checks read win2-v1 results (per-cell metrics with roles, spreads)


@dataclass(frozen=True)
class PromotionPolicy:
    name: str
    sha256: str
    description: str
    log_keys: tuple[Verifier, ...]
    witnesses: tuple[Verifier, ...]
    witness_threshold: int
    rule: str
    modes: tuple[str, ...]
    primary: str
    guards: tuple[str, ...]
    reported: tuple[str, ...]
    cells: tuple[str, ...]
    recorded_fields: tuple[str, ...]
    recompute: bool
    gates: tuple[str, ...]
    rng_tests: tuple[str, ...]
    same_cap: bool
    production_cap: bool
    no_thermal_dialback: bool
    require_day_to_day: bool
    max_day_to_day: float | None
    looks: LookBudget | None = None   # the error budget over looks ([looks]); None: the policy registers none

    @property
    def metric_roles(self) -> dict[str, str]:
        roles = {self.primary: "primary"}
        roles.update({m: "guard" for m in self.guards})
        roles.update({m: "reported" for m in self.reported})
        return roles

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "sha256": self.sha256,
            "trust": {"log_vkeys": [k.vkey() for k in self.log_keys],
                      "witness_vkeys": [w.vkey() for w in self.witnesses],
                      "witness_threshold": self.witness_threshold},
            "measurement": {"rule": self.rule, "modes": list(self.modes), "primary": self.primary,
                            "guards": list(self.guards), "reported": list(self.reported), "cells": list(self.cells),
                            "recorded_fields": list(self.recorded_fields), "recompute": self.recompute},
            "qualification": {"gates": list(self.gates), "rng_tests": list(self.rng_tests)},
            "clocks": {"same_cap": self.same_cap, "production_cap": self.production_cap,
                       "no_thermal_dialback": self.no_thermal_dialback},
            "archive": {"require_day_to_day": self.require_day_to_day, "max_day_to_day": self.max_day_to_day},
            "looks": None if self.looks is None else self.looks.to_json(),
        }


def _vkeys(f: Fields, key: str, *, cosigner: bool, required: bool) -> tuple[Verifier, ...]:
    values = f.strings(key, (), nonempty=True)
    if required and not values:
        raise f.fail(key, "pin at least one key (`tally keys vkey` prints the log's)")
    out = []
    for index, text in enumerate(values):
        try:
            verifier = parse_vkey(text)
        except FormatError as exc:
            raise FieldError(f"{f.at(key)}[{index}]", str(exc.args[0])) from None
        if verifier.is_cosigner != cosigner:
            kind = "a witness (cosignature, type 0x04)" if cosigner else "a log (type 0x01)"
            raise FieldError(f"{f.at(key)}[{index}]", f"must be {kind} vkey")
        out.append(verifier)
    return tuple(out)


def _metrics(f: Fields, key: str) -> tuple[str, ...]:
    values: tuple[str, ...] = f.strings(key, (), pattern=_METRIC, what="a metric name")
    return values


def read_policy(raw: bytes, source: str) -> PromotionPolicy:
    """Validate a promotion policy (``FormatError`` / ``FieldError`` naming the member)."""
    data = read_toml(raw, source, max_bytes=MAX_POLICY_BYTES)
    f = Fields(data, source)
    name = f.string("name", pattern=_NAME, what="a policy name (letters, digits, . _ -)")
    description = f.string("description", "")

    trust = f.table("trust", required=True)
    log_keys = _vkeys(trust, "log_vkeys", cosigner=False, required=True)
    witnesses = _vkeys(trust, "witness_vkeys", cosigner=True, required=False)
    threshold = int(trust.integer("witness_threshold", len(witnesses), low=0, high=len(witnesses)))
    trust.done()

    m = f.table("measurement", required=True)
    rule = m.string("rule", choices=_RULES)
    modes = m.strings("modes", choices=MODES[rule], nonempty=True)
    if not modes:
        raise m.fail("modes", "name at least one mode (fail closed)")
    primary = m.string("primary", pattern=_METRIC, what="a metric name")
    guards, reported = _metrics(m, "guards"), _metrics(m, "reported")
    seen = [primary, *guards, *reported]
    if len(set(seen)) != len(seen):
        raise m.fail("guards", "a metric is named twice across primary, guards and reported")
    cells = m.strings("cells", ())
    fields = m.strings("recorded_fields", (), pattern=_FIELD_PATH,
                       what="a dotted path into the decision payload (input.x, result.y.z, params.bar)")
    recompute = bool(m.boolean("recompute", True))
    m.done()

    q = f.table("qualification")
    gates = q.strings("gates", ("qualification",), choices=GATES)
    if "qualification" not in gates:
        raise q.fail("gates", "must include qualification: the carried-qualification binding is the point")
    rng_tests = q.strings("rng_tests", (), pattern=_TEST_ID, what="a test id")
    if rng_tests and "rng" not in gates:
        raise q.fail("rng_tests", "names RNG tests but the rng gate is not among the gates")
    q.done()

    c = f.table("clocks")
    same_cap = bool(c.boolean("same_cap", True))
    production_cap = bool(c.boolean("production_cap", True))
    no_thermal = bool(c.boolean("no_thermal_dialback", True))
    c.done()

    a = f.table("archive")
    require_day = bool(a.boolean("require_day_to_day", False))
    max_day = a.number("max_day_to_day", None, low=0.0)
    a.done()
    looks = _looks(f)
    f.done()
    return PromotionPolicy(
        name=name, sha256=hashlib.sha256(raw).hexdigest(), description=description, log_keys=log_keys,
        witnesses=witnesses, witness_threshold=threshold, rule=rule, modes=tuple(modes), primary=primary,
        guards=guards, reported=reported, cells=tuple(cells), recorded_fields=tuple(fields), recompute=recompute,
        gates=tuple(gates), rng_tests=tuple(rng_tests), same_cap=same_cap, production_cap=production_cap,
        no_thermal_dialback=no_thermal, require_day_to_day=require_day,
        max_day_to_day=None if max_day is None else float(max_day), looks=looks,
    )


def _looks(f: Fields) -> LookBudget | None:
    """``[looks]``: the total false-promotion rate ``alpha``, the most looks ``max_looks``, the ``spending`` rule."""
    if not f.has("looks"):
        f.raw("looks")
        return None
    t = f.table("looks")
    alpha = t.number("alpha", low=0.0, high=0.5, low_open=True, high_open=True)
    max_looks = t.integer("max_looks", low=1, high=MAX_LOOKS)
    spending = t.string("spending", "bonferroni", choices=SPENDINGS)
    t.done()
    return LookBudget(float(alpha), int(max_looks), str(spending))
