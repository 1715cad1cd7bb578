"""The rule registry: ``compute(input)`` validates an input and runs the rule it names."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ledger.errors import FieldError

from ..fields import Fields
from . import pp3, win2

__all__ = ["DEFAULT_PARAMS", "RULES", "compute", "validate"]

_RULES: dict[str, tuple[Callable[[Any], Any], Callable[[Any], dict[str, Any]]]] = {
    pp3.RULE: (pp3.parse, pp3.decide),
    win2.RULE: (win2.parse, win2.decide),
}
RULES: tuple[str, ...] = tuple(sorted(_RULES))
DEFAULT_PARAMS: dict[str, dict[str, Any]] = {
    pp3.RULE: pp3.Pp3Params().to_json(),
    win2.RULE: win2.Win2Params().to_json(),
}


def _rule_of(data: Any) -> str:
    if not isinstance(data, dict):
        raise FieldError("input", "expected an object")
    if "rule" not in data:
        raise FieldError("rule", f"required (expected one of {', '.join(RULES)})")
    rule: str = Fields(data, "", dialect="json").string("rule", choices=RULES)
    return rule


def validate(data: Any) -> None:
    """Raise ``FormatError`` (naming the field) unless ``data`` is a valid input of the rule it names."""
    parse, _ = _RULES[_rule_of(data)]
    parse(data)


def compute(data: Any) -> dict[str, Any]:
    """Validate ``data`` and return its rule's result (a JSON-ready dict; key names are a contract, ``docs/rules.md``).

    Pure and deterministic: the same input gives the same result, bit for bit. Values so large
    or small that a sum overflows or a result is not finite are bad input (``FormatError``).
    """
    parse, decide = _RULES[_rule_of(data)]
    parsed = parse(data)
    try:
        result = decide(parsed)
    except (OverflowError, ZeroDivisionError) as exc:
        raise FieldError("input", f"values out of range for the rule's arithmetic ({exc})") from None
    _check_finite(result, "result")
    return result


def _check_finite(value: Any, path: str) -> None:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise FieldError("input", f"values out of range: {path} is not finite")
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_finite(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_finite(item, f"{path}[{index}]")
