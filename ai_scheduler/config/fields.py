"""The schema's vocabulary: what one setting is, and the checks that a config file's values pass.

A setting is written once, as one field of a frozen dataclass in ``schema.py``::

    bind_concurrency: Annotated[int, Integer(1, 1024), Doc("Bindings in flight at once.", restart="...")] = 64

- the type is the attribute's (what every component reads);
- the *check* (`Integer`, `Number`, `Choice`...) takes the value as YAML gave it and returns the value the
  dataclass holds, or raises `Invalid` with the reason, worded for the operator
  (``must be an integer between 1 and 1024, got 'heavy'``); it also describes what it allows, for the docs;
- `Doc` holds the setting's text (the comment in ``default.yaml``, the meaning in the docs' table) and its
  reload behaviour: ``restart=`` names why a running daemon cannot apply a change; without it, a change
  applies at once;
- the default is the dataclass's.

The file's key is the field's name in camelCase (`yaml_key`). A field typed as another schema dataclass is
a section, ``tuple[Entry, ...]`` marked `Entries` is a list of entries, ``Mapping[str, Entry]`` marked
`Named` is a mapping of names the operator chooses to entries (an entry takes its ``name`` from its key).

The checks are ours, and so is the walk that runs them along these fields (`validation.py`, imported
by the first `parse_config`, not with the schema; why no validation library is said there).

The types' annotations are strings (``from __future__ import annotations``), so that importing the
schema evaluates none of them: the checks and texts are built when the first file is validated or the
files are generated (`schema_fields`, cached). The checks, `Doc`, `Field`, `Entries` and `Named` are
plain slotted classes rather than dataclasses, which would cost about a millisecond each at import.

Refusals keep what the hand-written parser said: the key's dotted path (`where`, as ``ConfigError``
shows it: ``profiles[0].scores[1].weight``, ``groups.vision.max['nvidia.com/gpu']``) and the reason; the
first refusal in the schema's order is the one reported.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Generic, TypeVar, get_args, get_type_hints

from ai_scheduler.quantity import MILLI_RESOURCES, parse_quantity, to_units

Step = str | int  # one step of a path: a key of a mapping or an index of a list
Where = Callable[..., str]  # the dotted path of the place a check runs at, or of a place below it

# Managed GPU memory is counted in bytes, as memory is; quota maps name it with this resource.
GPU_MEMORY_RESOURCE = "ai-scheduler.io/gpu-memory"
_MAX_QUANTITY = 2**63 - 1  # Kubernetes quantities are int64 underneath

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# A Kubernetes resource name: an optional DNS subdomain prefix and a qualified name ("nvidia.com/gpu").
RESOURCE_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_HOSTNAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


# --- paths and values, as the operator reads them ---------------------------------------------------


def yaml_key(field_name: str) -> str:
    """The file's spelling of a dataclass field: ``bind_concurrency`` -> ``bindConcurrency``."""
    head, *rest = field_name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def child(path: str, key: str) -> str:
    """``path.key``, or ``path['key']`` for a key that is not an identifier."""
    if not _IDENTIFIER.match(key):
        return f"{path}[{key!r}]"
    return f"{path}.{key}" if path else key


def dotted(steps: tuple[Step, ...]) -> str:
    """A path of steps as ConfigError spells it: ``("profiles", 0, "filters")`` -> ``profiles[0].filters``."""
    path = ""
    for step in steps:
        path = f"{path}[{step}]" if isinstance(step, int) else child(path, step)
    return path


def show(value: object) -> str:
    """A value as the operator wrote it in YAML, for 'got ...' in messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return repr(value)


def whole(value: float) -> float | int:
    """A number as default.yaml spells it: 10, not 10.0."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


class Invalid(ValueError):
    """A refusal: ``reason`` for the place ``at`` (steps below where the check runs). A reason that names
    other places is a function of `Where`, which spells their paths."""

    def __init__(self, reason: str | Callable[[Where], str], at: tuple[Step, ...] = ()) -> None:
        super().__init__(reason if isinstance(reason, str) else "(a reason that names other keys)")
        self.reason = reason
        self.at = at

    def worded(self, where: Where) -> str:
        return self.reason if isinstance(self.reason, str) else self.reason(where)


def naming(before: str, steps: tuple[Step, ...], after: str = "") -> Callable[[Where], str]:
    """A reason that names another place: ``before``, the path of ``steps`` (below where the check runs),
    ``after``."""
    return lambda where: f"{before}{where(*steps)}{after}"


def unknown_key(key: object, allowed: tuple[str, ...]) -> str:
    hint = difflib.get_close_matches(str(key), allowed, n=1)
    suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
    return f"unknown key {key!r}{suggestion}; expected one of {', '.join(allowed)}"


def mapping(value: object) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise Invalid(f"must be a mapping, got {show(value)}")
    return value


def listed(value: object) -> list[Any]:
    if not isinstance(value, list):
        raise Invalid(f"must be a list, got {show(value)}")
    return value


# --- checks of leaves --------------------------------------------------------------------------------


class Check:
    """A leaf's check: the value as YAML gave it in, the value the dataclass holds out, or `Invalid`.

    ``null_is_default``: a null value takes the field's default (a collection whose items are all
    commented out is null in YAML); otherwise null is refused like any other wrong type: ``port:`` with
    no value is an unfinished edit, not a default.

    Checks are plain slotted classes, set once in ``__init__`` and never changed (a dataclass each would
    cost about a millisecond at import).
    """

    __slots__ = ()
    null_is_default: ClassVar[bool] = False

    def __call__(self, value: object) -> Any:
        raise NotImplementedError

    def describe(self) -> str:
        """What the check allows, in a few words, for the docs' table and default.yaml."""
        raise NotImplementedError

    def __repr__(self) -> str:
        names = [name for cls in reversed(type(self).__mro__) for name in getattr(cls, "__slots__", ())
                 if not name.startswith("_")]
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in names)})"


class Integer(Check):
    __slots__ = ("high", "low")

    def __init__(self, low: int, high: int) -> None:
        self.low = low
        self.high = high

    def __call__(self, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not self.low <= value <= self.high:
            raise Invalid(f"must be an integer between {self.low} and {self.high}, got {show(value)}")
        return value

    def describe(self) -> str:
        return f"integer {self.low}..{self.high}"


class Real(Check):
    """A finite int or float, of any sign; booleans are not numbers."""

    __slots__ = ()

    def __call__(self, value: object) -> float:
        if not isinstance(value, bool) and isinstance(value, int | float):
            try:
                number = float(value)
            except OverflowError:  # an int beyond any float
                number = math.inf
            if math.isfinite(number):
                return number
        raise Invalid(f"must be a number, got {show(value)}")

    def describe(self) -> str:
        return "number"


_REAL = Real()


class Number(Check):
    """A finite number above ``minimum`` (or equal to it when ``inclusive``)."""

    __slots__ = ("inclusive", "minimum")

    def __init__(self, minimum: float = 0, inclusive: bool = False) -> None:
        self.minimum = minimum
        self.inclusive = inclusive

    def __call__(self, value: object) -> float:
        number = _REAL(value)
        if number < self.minimum or (number == self.minimum and not self.inclusive):
            raise Invalid(f"must be {self._bound()}, got {show(value)}")
        return number

    def _bound(self) -> str:
        return f"{'>=' if self.inclusive else '>'} {show(whole(self.minimum))}"

    def describe(self) -> str:
        return self._bound()


POSITIVE = Number()
NOT_NEGATIVE = Number(inclusive=True)
LEVEL = Integer(0, 100)
_WEIGHT = Integer(1, 100)  # of a resource, in ResourceWeights


class Boolean(Check):
    __slots__ = ()

    def __call__(self, value: object) -> bool:
        if not isinstance(value, bool):
            raise Invalid(f"must be true or false, got {show(value)}")
        return value

    def describe(self) -> str:
        return "true or false"


class String(Check):
    __slots__ = ()

    def __call__(self, value: object) -> str:
        if not isinstance(value, str):
            raise Invalid(f"must be a string, got {show(value)}")
        return value

    def describe(self) -> str:
        return "string"


_STRING = String()


class Name(Check):
    """A string that matches ``pattern`` and is at most ``longest`` characters (``empty``: or empty)."""

    __slots__ = ("empty", "longest", "pattern", "short", "what")

    def __init__(self, pattern: re.Pattern[str], longest: int, what: str, short: str,
                 empty: bool = False) -> None:
        self.pattern = pattern
        self.longest = longest
        self.what = what  # "must be {what}, got 'x'"
        self.short = short  # for the docs
        self.empty = empty

    def __call__(self, value: object) -> str:
        text = _STRING(value)
        if (text or not self.empty) and (len(text) > self.longest or not self.pattern.match(text)):
            raise Invalid(f"must be {self.what}, got {text!r}")
        return text

    def describe(self) -> str:
        return self.short


DNS_SUBDOMAIN = Name(
    DNS1123_SUBDOMAIN, 253,
    "a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', starting and ending with a letter or "
    "digit, at most 253 characters)",
    "DNS-1123 subdomain",
)
DNS_LABEL = Name(
    DNS1123_LABEL, 63,
    "a DNS-1123 label (lowercase letters, digits and '-', starting and ending with a letter or digit, at "
    "most 63 characters)",
    "DNS-1123 label",
)


class Choice(Check):
    __slots__ = ("choices",)

    def __init__(self, choices: tuple[str, ...]) -> None:
        self.choices = choices

    def __call__(self, value: object) -> str:
        text = _STRING(value)
        if text not in self.choices:
            raise Invalid(f"must be one of {', '.join(self.choices)}, got {text!r}")
        return text

    def describe(self) -> str:
        return " or ".join(f"`{c}`" for c in self.choices)


class Plugin(Check):
    """The name of one plugin of ``known``."""

    __slots__ = ("kind", "known")

    def __init__(self, known: tuple[str, ...], kind: str) -> None:
        self.known = known
        self.kind = kind  # "score plugin"

    def __call__(self, value: object) -> str:
        name = _STRING(value)
        if name not in self.known:
            raise Invalid(f"unknown {self.kind} {name!r}; known: {', '.join(self.known)}")
        return name

    def describe(self) -> str:
        return f"a {self.kind}: {', '.join(self.known)}"


class Plugins(Check):
    """A list of distinct plugins of ``known``, in the order they run."""

    __slots__ = ("_plugin", "kind", "known")
    null_is_default: ClassVar[bool] = True

    def __init__(self, known: tuple[str, ...], kind: str) -> None:
        self.known = known
        self.kind = kind  # "filter plugin"
        self._plugin = Plugin(known, kind)

    def __call__(self, value: object) -> tuple[str, ...]:
        names: list[str] = []
        for i, item in enumerate(listed(value)):
            try:
                name = self._plugin(item)
            except Invalid as exc:
                raise Invalid(exc.reason, (i,)) from None
            if name in names:
                j = names.index(name)
                raise Invalid(naming(f"duplicate {self.kind} {name!r} (also ", (j,), ")"), (i,))
            names.append(name)
        return tuple(names)

    def describe(self) -> str:
        return f"list of {self.kind}s: {', '.join(self.known)}"


class LabelKeys(Check):
    """A list of distinct node label keys."""

    __slots__ = ()

    def __call__(self, value: object) -> tuple[str, ...]:
        keys: list[str] = []
        for i, item in enumerate(listed(value)):
            try:
                key = _STRING(item)
            except Invalid as exc:
                raise Invalid(exc.reason, (i,)) from None
            if not _LABEL_KEY.match(key):
                raise Invalid(f"must be a label key like topology.kubernetes.io/zone, got {show(item)}", (i,))
            if key in keys:
                raise Invalid(f"duplicate label key {key!r}", (i,))
            keys.append(key)
        return tuple(keys)

    def describe(self) -> str:
        return "list of node label keys"


_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class NodeLabels(Check):
    """Node label key -> value (a label selector's equality terms); empty: none."""

    __slots__ = ()
    null_is_default: ClassVar[bool] = True

    def __call__(self, value: object) -> Mapping[str, str]:
        from ai_scheduler.config.schema import FrozenMap

        labels: dict[str, str] = {}
        for key, item in mapping(value).items():
            if not isinstance(key, str) or not _LABEL_KEY.match(key):
                raise Invalid(f"must be a label key like topology.kubernetes.io/zone, got {show(key)}")
            text = str(item).lower() if isinstance(item, bool) else item
            if not isinstance(text, str | int) or len(str(text)) > 63 or not _LABEL_VALUE.match(str(text)):
                raise Invalid(f"must be a label value (63 characters at most), got {show(item)}", (key,))
            labels[key] = str(text)
        return FrozenMap(labels)

    def describe(self) -> str:
        return "node label key -> value"


class BindAddress(Check):
    __slots__ = ()

    def __call__(self, value: object) -> str:
        text = _STRING(value)
        try:
            ipaddress.ip_address(text)
        except ValueError:
            if len(text) > 253 or not _HOSTNAME.match(text):
                raise Invalid(f"must be an IP address or a host name, got {text!r}") from None
        return text

    def describe(self) -> str:
        return "IP address or host name"


_C = TypeVar("_C", bound=Check)


class Nullable(Check, Generic[_C]):
    """``inner``'s values, or null."""

    __slots__ = ("inner",)

    def __init__(self, inner: _C) -> None:
        self.inner = inner

    def __call__(self, value: object) -> Any:
        return None if value is None else self.inner(value)

    def describe(self) -> str:
        return f"{self.inner.describe()} or null"


def _resource_name(name: object) -> str:
    if not isinstance(name, str) or not RESOURCE_NAME.match(name):
        raise Invalid("resource names must be Kubernetes resource names such as 'cpu' or "
                      f"'nvidia.com/gpu', got {show(name)}")
    return name


def quantity_unit(resource: str) -> str:
    """The resource whose units an amount is counted in: managed GPU memory in bytes, as memory."""
    return "memory" if resource == GPU_MEMORY_RESOURCE else resource


class Quantities(Check):
    """Resource name -> Kubernetes quantity, kept in the resource's integer units (thousandths: cpu, GPU
    fractions); empty limits nothing."""

    __slots__ = ()
    null_is_default: ClassVar[bool] = True

    def __call__(self, value: object) -> Mapping[str, int]:
        from ai_scheduler.config.schema import FrozenMap

        result = {}
        for name, amount in mapping(value).items():
            resource = _resource_name(name)
            result[resource] = self.units(resource, amount)
        return FrozenMap(result)

    @staticmethod
    def units(resource: str, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise Invalid(f"must be a Kubernetes quantity such as 8, '500m' or '80Gi', got {show(value)}",
                          (resource,))
        try:
            amount = parse_quantity(value)
            finite = amount.is_finite()
        except (ValueError, ArithmeticError):  # QuantityError, a runaway exponent
            finite = False
        if not finite:
            raise Invalid(f"invalid quantity {show(value)}", (resource,))
        if amount < 0:
            raise Invalid(f"must not be negative, got {show(value)}", (resource,))
        unit = quantity_unit(resource)
        if amount * (1000 if unit in MILLI_RESOURCES else 1) > _MAX_QUANTITY:
            raise Invalid(f"is too large, got {show(value)}", (resource,))
        return to_units(unit, value)

    def describe(self) -> str:
        return "resource name -> quantity"


class ResourceWeights(Check):
    """Resource name -> integer weight 1..100; at least one resource."""

    __slots__ = ()
    null_is_default: ClassVar[bool] = True

    def __call__(self, value: object) -> Mapping[str, int]:
        from ai_scheduler.config.schema import FrozenMap

        data = mapping(value)
        if not data:
            raise Invalid("must name at least one resource")
        result = {}
        for name, weight in data.items():
            resource = _resource_name(name)
            try:
                result[resource] = _WEIGHT(weight)
            except Invalid as exc:
                raise Invalid(exc.reason, (resource,)) from None
        return FrozenMap(result)

    def describe(self) -> str:
        return "resource name -> integer 1..100"


class Factors(Check):
    """Factor name (of ``known``) -> weight, any finite number; at least one factor."""

    __slots__ = ("known",)

    def __init__(self, known: tuple[str, ...]) -> None:
        self.known = known

    def __call__(self, value: object) -> Mapping[str, float]:
        from ai_scheduler.config.schema import FrozenMap

        weights = {}
        for factor, weight in mapping(value).items():
            if factor not in self.known:
                at: tuple[Step, ...] = (factor,) if isinstance(factor, str) else ()
                raise Invalid(f"unknown factor {factor!r}; known: {', '.join(self.known)}", at)
            try:
                weights[factor] = _REAL(weight)
            except Invalid as exc:
                raise Invalid(exc.reason, (factor,)) from None
        if not weights:
            raise Invalid("must name at least one factor")
        return FrozenMap(weights)

    def describe(self) -> str:
        return f"factor -> number; factors: {', '.join(self.known)}"


# --- the text of a setting ---------------------------------------------------------------------------


class Doc:
    """A setting's text and reload behaviour.

    ``text``: what it does, the comment above it in default.yaml and its meaning in the docs' table.
    ``restart``: why a change waits for a restart (None: it applies at once); said of a section, it holds
    for every key inside. ``default``: the default in words, where it is not a value of its own (a name
    taken from elsewhere). ``required``: the reason given when the key is left out (the field has no
    default). ``example``: a commented example, for a collection empty by default. ``preface``: text
    written before the setting in default.yaml only (a heading for what follows).
    """

    __slots__ = ("default", "example", "preface", "required", "restart", "text")

    def __init__(self, text: str, restart: str | None = None, default: str | None = None,
                 required: str | None = None, example: Any = None, preface: str | None = None) -> None:
        self.text = text
        self.restart = restart
        self.default = default
        self.required = required
        self.example = example
        self.preface = preface

    def __repr__(self) -> str:
        return f"Doc({self.text!r})"


# --- sections, lists of entries and named entries -------------------------------------------------------


class Field:
    """One field of a schema dataclass, as the file sees it."""

    __slots__ = ("annotation", "check", "default", "doc", "key", "name", "null_is_default")

    def __init__(self, name: str, key: str, annotation: Any, doc: Doc | None, check: Any, default: Any,
                 null_is_default: bool) -> None:
        self.name = name  # the attribute
        self.key = key  # the file's key
        self.annotation = annotation  # with its Annotated metadata
        self.doc = doc
        self.check = check  # a Check, Entries, Named, or None for a section
        self.default = default  # dataclasses.MISSING when required
        self.null_is_default = null_is_default

    def __repr__(self) -> str:
        return f"Field({self.name!r}, {self.key!r})"


def schema_fields(cls: type[Any]) -> tuple[Field, ...]:
    """The fields of a schema dataclass, in order (their annotations evaluated at the first call)."""
    found = _FIELDS.get(cls)
    if found is None:
        found = _FIELDS[cls] = _schema_fields(cls)
    return found


_FIELDS: dict[type[Any], tuple[Field, ...]] = {}


def _schema_fields(cls: type[Any]) -> tuple[Field, ...]:
    hints = get_type_hints(cls, include_extras=True)
    result = []
    for f in dataclasses.fields(cls):
        annotation = hints[f.name]
        extras = getattr(annotation, "__metadata__", ())
        doc = next((m for m in extras if isinstance(m, Doc)), None)
        check = next((m for m in extras if isinstance(m, Check | Entries | Named)), None)
        default: Any = dataclasses.MISSING
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        is_section = section_type(annotation) is not None
        null_is_default = is_section or bool(getattr(check, "null_is_default", False))
        result.append(Field(f.name, yaml_key(f.name), annotation, doc, check, default, null_is_default))
    return tuple(result)


def section_type(annotation: Any) -> type[Section] | None:
    """The schema dataclass a field's type is (a section), if it is one; None for any other type."""
    inner = get_args(annotation)[0] if getattr(annotation, "__metadata__", ()) else annotation
    return inner if isinstance(inner, type) and issubclass(inner, Section) else None


def file_keys(cls: type[Any]) -> tuple[str, ...]:
    """The keys the file may use in an entry of this section (a named entry's name is its key, not one).
    Read from the dataclass's fields' names alone: no annotation is evaluated."""
    return tuple(yaml_key(f.name) for f in dataclasses.fields(cls) if not (cls.named and f.name == "name"))


class Section:
    """A schema dataclass: refuses a non-mapping and unknown keys, says which required key is missing,
    lets null collections take their defaults, then hands the rest to the fields' checks (validation.py).

    A subclass may prepare the raw mapping (`prepare`: derived defaults) and check the built dataclass
    against its raw mapping (`verify`: rules between fields), raising `Invalid`.
    """

    __slots__ = ()
    named: ClassVar[bool] = False  # an entry of a Named mapping: its name comes from its key

    @classmethod
    def prepare(cls, data: dict[Any, Any]) -> dict[Any, Any]:
        return data

    @classmethod
    def verify(cls, built: Any, data: Mapping[Any, Any]) -> Any:
        return built


class Entries:
    """A list of entries whose ``unique`` attribute (file key ``key``) differs from entry to entry;
    ``empty``: the reason an empty list is refused (None: allowed)."""

    __slots__ = ("empty", "noun", "unique")
    null_is_default: ClassVar[bool] = True

    def __init__(self, noun: str, unique: str = "name", empty: str | None = None) -> None:
        self.noun = noun
        self.unique = unique
        self.empty = empty

    def __repr__(self) -> str:
        return f"Entries({self.noun!r}, unique={self.unique!r}, empty={self.empty!r})"


class Named:
    """A mapping of names the operator chooses to entries; a null entry is an empty one.
    ``name``: a check of the names beyond being non-empty strings (with its own reason)."""

    __slots__ = ("name", "name_reason", "noun")
    null_is_default: ClassVar[bool] = True

    def __init__(self, noun: str, name: Callable[[str], bool] | None = None, name_reason: str = "") -> None:
        self.noun = noun
        self.name = name
        self.name_reason = name_reason

    def __repr__(self) -> str:
        return f"Named({self.noun!r})"
