"""The schema's vocabulary: what one setting is, and how a config file is checked against the schema.

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

pydantic v2 walks the file along these types (`validate`): it builds the dataclasses without calling
their ``__init__`` twice, tracks where in the file each value sits (its ``loc``, with the operator's own
keys), and collects the errors in the schema's order; the checks and the `Section` wrapper here word
every refusal, so pydantic's own messages never reach the operator. pydantic is imported when the first
file is validated, not when the types are imported: the simulator, the tracer and tests that build a
Config in code never pay for it.

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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, get_args, get_type_hints

from ai_scheduler.quantity import MILLI_RESOURCES, parse_quantity, to_units

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, TypeAdapter
    from pydantic_core import CoreSchema

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
    """

    null_is_default: ClassVar[bool] = False

    def __call__(self, value: object) -> Any:
        raise NotImplementedError

    def describe(self) -> str:
        """What the check allows, in a few words, for the docs' table and default.yaml."""
        raise NotImplementedError

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        from pydantic_core import core_schema

        return core_schema.no_info_plain_validator_function(self)


@dataclass(frozen=True)
class Integer(Check):
    low: int
    high: int

    def __call__(self, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not self.low <= value <= self.high:
            raise Invalid(f"must be an integer between {self.low} and {self.high}, got {show(value)}")
        return value

    def describe(self) -> str:
        return f"integer {self.low}..{self.high}"


@dataclass(frozen=True)
class Real(Check):
    """A finite int or float, of any sign; booleans are not numbers."""

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


@dataclass(frozen=True)
class Number(Check):
    """A finite number above ``minimum`` (or equal to it when ``inclusive``)."""

    minimum: float = 0
    inclusive: bool = False

    def __call__(self, value: object) -> float:
        number = Real()(value)
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


@dataclass(frozen=True)
class Boolean(Check):
    def __call__(self, value: object) -> bool:
        if not isinstance(value, bool):
            raise Invalid(f"must be true or false, got {show(value)}")
        return value

    def describe(self) -> str:
        return "true or false"


@dataclass(frozen=True)
class String(Check):
    def __call__(self, value: object) -> str:
        if not isinstance(value, str):
            raise Invalid(f"must be a string, got {show(value)}")
        return value

    def describe(self) -> str:
        return "string"


@dataclass(frozen=True)
class Name(Check):
    """A string that matches ``pattern`` and is at most ``longest`` characters (``empty``: or empty)."""

    pattern: re.Pattern[str]
    longest: int
    what: str  # "must be {what}, got 'x'"
    short: str  # for the docs
    empty: bool = False

    def __call__(self, value: object) -> str:
        text = String()(value)
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


@dataclass(frozen=True)
class Choice(Check):
    choices: tuple[str, ...]

    def __call__(self, value: object) -> str:
        text = String()(value)
        if text not in self.choices:
            raise Invalid(f"must be one of {', '.join(self.choices)}, got {text!r}")
        return text

    def describe(self) -> str:
        return " or ".join(f"`{c}`" for c in self.choices)


@dataclass(frozen=True)
class Plugin(Check):
    """The name of one plugin of ``known``."""

    known: tuple[str, ...]
    kind: str  # "score plugin"

    def __call__(self, value: object) -> str:
        name = String()(value)
        if name not in self.known:
            raise Invalid(f"unknown {self.kind} {name!r}; known: {', '.join(self.known)}")
        return name

    def describe(self) -> str:
        return f"a {self.kind}: {', '.join(self.known)}"


@dataclass(frozen=True)
class Plugins(Check):
    """A list of distinct plugins of ``known``, in the order they run."""

    known: tuple[str, ...]
    kind: str  # "filter plugin"
    null_is_default: ClassVar[bool] = True

    def __call__(self, value: object) -> tuple[str, ...]:
        names: list[str] = []
        for i, item in enumerate(listed(value)):
            try:
                name = Plugin(self.known, self.kind)(item)
            except Invalid as exc:
                raise Invalid(exc.reason, (i,)) from None
            if name in names:
                j = names.index(name)
                raise Invalid(naming(f"duplicate {self.kind} {name!r} (also ", (j,), ")"), (i,))
            names.append(name)
        return tuple(names)

    def describe(self) -> str:
        return f"list of {self.kind}s: {', '.join(self.known)}"


@dataclass(frozen=True)
class LabelKeys(Check):
    """A list of distinct node label keys."""

    def __call__(self, value: object) -> tuple[str, ...]:
        keys: list[str] = []
        for i, item in enumerate(listed(value)):
            try:
                key = String()(item)
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


@dataclass(frozen=True)
class BindAddress(Check):
    def __call__(self, value: object) -> str:
        text = String()(value)
        try:
            ipaddress.ip_address(text)
        except ValueError:
            if len(text) > 253 or not _HOSTNAME.match(text):
                raise Invalid(f"must be an IP address or a host name, got {text!r}") from None
        return text

    def describe(self) -> str:
        return "IP address or host name"


_C = TypeVar("_C", bound=Check)


@dataclass(frozen=True)
class Nullable(Check, Generic[_C]):
    """``inner``'s values, or null."""

    inner: _C

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


@dataclass(frozen=True)
class Quantities(Check):
    """Resource name -> Kubernetes quantity, kept in the resource's integer units (thousandths: cpu, GPU
    fractions); empty limits nothing."""

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


@dataclass(frozen=True)
class ResourceWeights(Check):
    """Resource name -> integer weight 1..100; at least one resource."""

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
                result[resource] = Integer(1, 100)(weight)
            except Invalid as exc:
                raise Invalid(exc.reason, (resource,)) from None
        return FrozenMap(result)

    def describe(self) -> str:
        return "resource name -> integer 1..100"


@dataclass(frozen=True)
class Factors(Check):
    """Factor name (of ``known``) -> weight, any finite number; at least one factor."""

    known: tuple[str, ...]

    def __call__(self, value: object) -> Mapping[str, float]:
        from ai_scheduler.config.schema import FrozenMap

        weights = {}
        for factor, weight in mapping(value).items():
            if factor not in self.known:
                at: tuple[Step, ...] = (factor,) if isinstance(factor, str) else ()
                raise Invalid(f"unknown factor {factor!r}; known: {', '.join(self.known)}", at)
            try:
                weights[factor] = Real()(weight)
            except Invalid as exc:
                raise Invalid(exc.reason, (factor,)) from None
        if not weights:
            raise Invalid("must name at least one factor")
        return FrozenMap(weights)

    def describe(self) -> str:
        return f"factor -> number; factors: {', '.join(self.known)}"


# --- the text of a setting ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Doc:
    """A setting's text and reload behaviour.

    ``text``: what it does, the comment above it in default.yaml and its meaning in the docs' table.
    ``restart``: why a change waits for a restart (None: it applies at once); said of a section, it holds
    for every key inside. ``default``: the default in words, where it is not a value of its own (a name
    taken from elsewhere). ``required``: the reason given when the key is left out (the field has no
    default). ``example``: a commented example, for a collection empty by default. ``preface``: text
    written before the setting in default.yaml only (a heading for what follows).
    """

    text: str
    restart: str | None = None
    default: str | None = None
    required: str | None = None
    example: Any = None
    preface: str | None = None


# --- sections, lists of entries and named entries -------------------------------------------------------


@dataclass(frozen=True)
class Field:
    """One field of a schema dataclass, as the file sees it."""

    name: str  # the attribute
    key: str  # the file's key
    annotation: Any  # with its Annotated metadata
    doc: Doc | None
    check: Any  # a Check, Entries, Named, or None for a section
    default: Any  # dataclasses.MISSING when required
    null_is_default: bool


def schema_fields(cls: type[Any]) -> tuple[Field, ...]:
    """The fields of a schema dataclass, in order."""
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
        inner = get_args(annotation)[0] if extras else annotation
        is_section = isinstance(inner, type) and issubclass(inner, Section)
        null_is_default = is_section or bool(getattr(check, "null_is_default", False))
        result.append(Field(f.name, yaml_key(f.name), annotation, doc, check, default, null_is_default))
    return tuple(result)


def file_keys(cls: type[Any]) -> tuple[str, ...]:
    """The keys the file may use in an entry of this section (a named entry's name is its key, not one)."""
    return tuple(f.key for f in schema_fields(cls) if not (cls.named and f.key == "name"))


class Section:
    """A schema dataclass: refuses a non-mapping and unknown keys, says which required key is missing,
    lets null collections take their defaults, then hands the rest to the fields' checks.

    A subclass may prepare the raw mapping (`prepare`: derived defaults) and check the built dataclass
    against its raw mapping (`verify`: rules between fields), raising `Invalid`.
    """

    __slots__ = ()
    __pydantic_config__: ClassVar[dict[str, Any]] = {"alias_generator": yaml_key}
    named: ClassVar[bool] = False  # an entry of a Named mapping: its name comes from its key

    @classmethod
    def prepare(cls, data: dict[Any, Any]) -> dict[Any, Any]:
        return data

    @classmethod
    def verify(cls, built: Any, data: Mapping[Any, Any]) -> Any:
        return built

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        from pydantic_core import core_schema

        fields = schema_fields(cls)
        allowed = file_keys(cls)
        accepted = {f.key for f in fields}  # a named entry's name, put in by Named
        null_default = {f.key for f in fields if f.null_is_default}
        # A required key with a reason of its own is missing when absent or null; another (one that
        # `prepare` derives) only when absent: a null is then its check's to refuse.
        required = [(f.key, f.doc.required if f.doc and f.doc.required else "is required",
                     bool(f.doc and f.doc.required)) for f in fields if f.default is dataclasses.MISSING]

        def validate(value: object, build: Callable[[Any], Any]) -> Any:
            raw = mapping(value)
            for key in raw:
                if key not in allowed and not (key in accepted and cls.named):
                    raise Invalid(unknown_key(key, allowed))
            data = cls.prepare({k: v for k, v in raw.items() if not (v is None and k in null_default)})
            for key, reason, null_missing in required:
                if key not in data or (null_missing and data[key] is None):
                    raise Invalid(reason, (key,))
            return cls.verify(build(data), raw)

        return core_schema.no_info_wrap_validator_function(validate, handler(source))


@dataclass(frozen=True)
class Entries:
    """A list of entries whose ``unique`` attribute (file key ``key``) differs from entry to entry;
    ``empty``: the reason an empty list is refused (None: allowed)."""

    noun: str
    unique: str = "name"
    empty: str | None = None
    null_is_default: ClassVar[bool] = True

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        from pydantic_core import core_schema

        key = yaml_key(self.unique)

        def validate(value: object, build: Callable[[Any], Any]) -> Any:
            items = listed(value)
            if not items and self.empty:
                raise Invalid(self.empty)
            entries: tuple[Any, ...] = build(items)
            seen: dict[Any, int] = {}
            for i, entry in enumerate(entries):
                name = getattr(entry, self.unique)
                if name in seen:
                    j = seen[name]
                    raise Invalid(naming(f"duplicate {self.noun} {name!r} (also ", (j,), ")"), (i, key))
                seen[name] = i
            return entries

        return core_schema.no_info_wrap_validator_function(validate, handler(source))


@dataclass(frozen=True)
class Named:
    """A mapping of names the operator chooses to entries; a null entry is an empty one.
    ``name``: a check of the names beyond being non-empty strings (with its own reason)."""

    noun: str
    name: Callable[[str], bool] | None = None
    name_reason: str = ""
    null_is_default: ClassVar[bool] = True

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        from pydantic_core import core_schema

        from ai_scheduler.config.schema import FrozenMap

        entry = get_args(source)[1]

        def validate(value: object, build: Callable[[Any], Any]) -> Any:
            bodies = {}
            for name, body in mapping(value).items():
                if not isinstance(name, str) or not name:
                    raise Invalid(f"{self.noun} names must be non-empty strings, got {show(name)}")
                if self.name is not None and not self.name(name):
                    raise Invalid(f"{self.name_reason}, got {name!r}")
                body = {} if body is None else body
                if isinstance(body, Mapping):
                    if "name" in body:
                        raise Invalid(unknown_key("name", file_keys(entry)), (name,))
                    body = {**body, "name": name}
                bodies[name] = body
            return FrozenMap(build(bodies))

        return core_schema.no_info_wrap_validator_function(validate, handler(source))


# --- validating a file -------------------------------------------------------------------------------

_T = TypeVar("_T")


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def _adapter(cls: type[_T]) -> TypeAdapter[_T]:
    """pydantic's validator of a schema dataclass, built at its first use (pydantic imported then)."""
    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        from pydantic import TypeAdapter

        adapter = _ADAPTERS[cls] = TypeAdapter(cls)
    return adapter


def validate(cls: type[_T], data: object) -> _T:
    """``data`` checked against the schema dataclass ``cls`` and built as one; raises `Refused` with the
    path and reason of the first refusal."""
    from pydantic import ValidationError

    adapter = _adapter(cls)
    try:
        built: _T = adapter.validate_python(data)
        return built
    except ValidationError as exc:
        raise _first(exc) from None


class Refused(Exception):
    """The first refusal of a file: the key's dotted path and the reason."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(key, reason)
        self.key = key
        self.reason = reason


def _first(exc: Any) -> Refused:
    for error in _errors(exc):
        loc = tuple(error["loc"])
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, Invalid):

            def where(*steps: Step, base: tuple[Step, ...] = loc) -> str:
                return dotted(base + steps)

            return Refused(dotted(loc + cause.at), cause.worded(where))
        return Refused(dotted(loc), str(error["msg"]))  # not one of ours: pydantic's words, as a last resort
    return Refused("", str(exc))


def _errors(exc: Any) -> Iterator[dict[str, Any]]:
    yield from exc.errors(include_url=False)
