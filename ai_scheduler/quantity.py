"""Kubernetes resource quantities ("100m", "1.5Gi", "2e3") as exact integers.

kube-scheduler compares cpu in millicores and everything else in whole units,
rounding fractional values up; we keep the same integer domain so that fit
checks agree with it exactly.

The API server accepts quantities of any size ("12345678901234567890",
"1e400"), but every amount ends up in int64 numpy columns, summed over the pods
of a node, and divided as a float by the priority factors. So amounts saturate
at `MAX_UNITS`, here where text becomes a number: more than any node has, so a
request at the bound fits nowhere ("Insufficient memory"), as the real one
would not. Parsing raises nothing but QuantityError, however large the exponent.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Context, Decimal, DivisionByZero, InvalidOperation
from functools import lru_cache

from ai_scheduler.messages import echo

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
# ASCII digits: `\d` would take the digits of any script, which Kubernetes does not.
_PATTERN = re.compile(
    r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$"
)

# Resources measured in thousandths, as kube-scheduler's MilliValue does for cpu; and the quota resource of
# managed GPU fractions (cache/tenancy.py), so that a quota of "1.5" of them is 1.5 GPUs.
MILLI_RESOURCES = frozenset({"cpu", "ai-scheduler.io/gpu-fraction"})

# Largest amount (in units: millicores, bytes, devices) a quantity stands for; beyond it amounts saturate.
# 2**53 is 8 PiB of memory or 9e12 cores, exact as a float, and 1,023 amounts at the bound still sum within
# int64 (the cache adds up the pods of a node; nothing but fit checks limits how many a node holds).
MAX_UNITS = 2**53
# Decimal arithmetic that turns an overflowing exponent into an infinity (which saturates) instead of raising.
_ARITHMETIC = Context(traps=[InvalidOperation, DivisionByZero])
# Go's resource.ParseQuantity reads an exponent as an int64: a longer one is not a quantity.
_MAX_EXPONENT_DIGITS = 18


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(text: str | int | float) -> Decimal:
    """Parse a quantity into an exact Decimal of base units (an infinity for a runaway exponent)."""
    if isinstance(text, str):
        return _parse_text(text)
    if isinstance(text, bool) or not isinstance(text, int | float):  # e.g. a list in malformed JSON
        raise QuantityError(f"invalid quantity {echo(text)}")
    value = Decimal(text) if isinstance(text, int) else Decimal(str(text))
    if not value.is_finite():  # a float nan or inf, from YAML
        raise QuantityError(f"invalid quantity {echo(text)}")
    return value


@lru_cache(maxsize=4096)
def _parse_text(text: str) -> Decimal:
    match = _PATTERN.match(text.strip())
    if not match:
        raise QuantityError(f"invalid quantity {echo(text)}")
    number, exponent, suffix = match.groups()
    try:
        value = Decimal(number)
    except InvalidOperation as exc:  # pragma: no cover - the pattern admits only numbers
        raise QuantityError(f"invalid quantity {echo(text)}") from exc
    if exponent:
        if len(exponent.lstrip("eE+-")) > _MAX_EXPONENT_DIGITS:
            raise QuantityError(f"invalid quantity {echo(text)}: exponent out of range")
        return value.scaleb(int(exponent[1:]), _ARITHMETIC)  # may be +-Infinity: to_units saturates
    if suffix in _BINARY:
        return _ARITHMETIC.multiply(value, _BINARY[suffix])
    return _ARITHMETIC.multiply(value, _DECIMAL[suffix or ""])


def to_units(resource: str, text: str | int | float) -> int:
    """Integer amount used in fit checks: millicores for cpu, rounded-up units otherwise; saturates at
    +-MAX_UNITS. A string's amount is remembered, so that the records of many pods share one int."""
    if type(text) is str:
        return _text_units(resource, text)
    return _to_units(resource, text)


@lru_cache(maxsize=4096)
def _text_units(resource: str, text: str) -> int:
    return _to_units(resource, text)


def _to_units(resource: str, text: str | int | float) -> int:
    value = parse_quantity(text)
    if resource in MILLI_RESOURCES:
        value = _ARITHMETIC.multiply(value, 1000)
    if value >= MAX_UNITS:
        return MAX_UNITS
    if value <= -MAX_UNITS:
        return -MAX_UNITS
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


_GO_INT = re.compile(r"[+-]?[0-9]{1,19}")


def parse_go_int(text: object) -> int | None:
    """An integer written as Go's strconv.Atoi reads one (ASCII digits, an optional sign, no blanks, within
    int64), or None: Python's int() would also take " 3", "1_000" and the digits of other scripts."""
    if not isinstance(text, str) or not _GO_INT.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


# Durations as the docs spell run-time estimates ("90m", "1h30m", "2h", "45s", and "d" for days): ASCII
# digits, no blanks.
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")
_DURATIONS = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?(?:ms|s|m|h|d))+")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# Go's time.Duration is int64 nanoseconds (about 292 years): ParseDuration refuses anything longer. So do we,
# which also keeps an estimate of "9999...9h" from becoming an infinity, and the factors from becoming NaN.
MAX_DURATION_SECONDS = (2**63 - 1) / 1e9


def parse_duration(text: str | None) -> float | None:
    """Go-style durations ("90m", "1h30m", "2h", "45s"); None when absent, malformed or out of range."""
    if not isinstance(text, str) or not _DURATIONS.fullmatch(text):
        return None
    seconds = sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION.findall(text))
    return seconds if seconds <= MAX_DURATION_SECONDS else None
