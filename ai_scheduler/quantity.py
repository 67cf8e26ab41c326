"""Kubernetes resource quantities ("100m", "1.5Gi", "2e3") as exact integers.

kube-scheduler compares cpu in millicores and everything else in whole units,
rounding fractional values up; we keep the same integer domain so that fit
checks agree with it exactly.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from functools import lru_cache

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_PATTERN = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$")

# Resources measured in thousandths, as kube-scheduler's MilliValue does for cpu.
MILLI_RESOURCES = frozenset({"cpu"})


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


@lru_cache(maxsize=4096)
def parse_quantity(text: str | int | float) -> Decimal:
    """Parse a quantity into an exact Decimal of base units."""
    if isinstance(text, bool):
        raise QuantityError(f"invalid quantity {text!r}")
    if isinstance(text, int | float):
        return Decimal(str(text))
    match = _PATTERN.match(text.strip())
    if not match:
        raise QuantityError(f"invalid quantity {text!r}")
    number, exponent, suffix = match.groups()
    try:
        value = Decimal(number)
    except InvalidOperation as exc:  # pragma: no cover - the pattern admits only numbers
        raise QuantityError(f"invalid quantity {text!r}") from exc
    if exponent:
        return value * (Decimal(10) ** int(exponent[1:]))
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    return value * _DECIMAL[suffix or ""]


def to_units(resource: str, text: str | int | float) -> int:
    """Integer amount used in fit checks: millicores for cpu, rounded-up units otherwise."""
    value = parse_quantity(text)
    if resource in MILLI_RESOURCES:
        value = value * 1000
    return int(value.to_integral_value(rounding=ROUND_CEILING))


def format_units(resource: str, amount: int) -> str:
    """Human form of an integer amount, for messages and logs."""
    if resource in MILLI_RESOURCES:
        return f"{amount}m" if amount % 1000 else str(amount // 1000)
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _BINARY[suffix]
        if amount >= unit and amount % unit == 0:
            return f"{amount // unit}{suffix}"
    return str(amount)
