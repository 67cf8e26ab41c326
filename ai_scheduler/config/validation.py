"""A config file checked against the schema: our own walk over the schema's fields.

Each schema dataclass gets, at its first validation, a validator made from its `schema_fields`
(`_section`): it refuses a non-mapping and unknown keys, lets null collections take their defaults,
lets the section `prepare` what it derives, says which required key is missing, then runs each field's
check, list of entries (`_entries`), named entries (`_named`) or section at that field's place, in the
schema's order, builds the dataclass and runs its `verify`. Validators are plain closures over what they
need, cached per dataclass; a field without a check (other than a named entry's ``name``, which its key
gives) is a schema error, raised when its validator is made.

The walk knows where it is: the steps from the file's root (``("profiles", 0, "scores")``, with the
operator's own keys), passed down, never built up on the way back. A check's `Invalid` becomes `Refused`
at the place it ran (`refused`: the dotted path, with the steps below that the check named, and its
reason, a reason that names other keys spelled from that place); nothing after the first refusal runs,
so the first refusal in the schema's order is the one reported, as ``ConfigError``.

Why no validation library: every value is already checked, and every refusal worded, by the schema's own
checks (fields.py), so a library would only walk the file and keep the path, which is these few lines.
pydantic v2 did that here for ~100 ms at the daemon's start (importing it and building its validator;
importing pydantic_core alone takes ~30 ms, more than this whole module's first use), and its own
messages had to be kept from the operator. This module is imported by the first `parse_config`, not with
the schema: the simulator, the tracer and tests that build a Config in code never load it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, get_args

from ai_scheduler.config.fields import (
    Check,
    Entries,
    Field,
    Invalid,
    Named,
    Step,
    dotted,
    file_keys,
    listed,
    mapping,
    naming,
    schema_fields,
    section_type,
    show,
    unknown_key,
    yaml_key,
)
from ai_scheduler.config.schema import FrozenMap

_T = TypeVar("_T")

# A validator of one place of the file: the value there as YAML gave it, and the steps from the file's
# root to it; the value the dataclass holds, or `Refused`.
Run = Callable[[Any, tuple[Step, ...]], Any]


class Refused(Exception):
    """The first refusal of a file: the key's dotted path and the reason."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(key, reason)
        self.key = key
        self.reason = reason


def refused(at: tuple[Step, ...], exc: ValueError) -> Refused:
    """A check's refusal at the place ``at`` (its steps below ``at`` added), as the operator reads it. A
    ValueError that is no `Invalid` (a check's bug) still refuses the file, at that place, in the words
    pydantic gave it when it drove the checks, rather than escape as another exception."""
    if not isinstance(exc, Invalid):
        return Refused(dotted(at), f"Value error, {exc}")

    def where(*steps: Step) -> str:
        return dotted(at + steps)

    return Refused(dotted(at + exc.at), exc.worded(where))


def validate(cls: type[_T], data: object) -> _T:
    """``data`` checked against the schema dataclass ``cls`` and built as one; raises `Refused` with the
    path and reason of the first refusal."""
    built: _T = _validator(cls)(data, ())
    return built


_VALIDATORS: dict[type[Any], Run] = {}


def _validator(cls: type[Any]) -> Run:
    """The validator of a schema dataclass, made at its first use."""
    run = _VALIDATORS.get(cls)
    if run is None:
        run = _VALIDATORS[cls] = _section(cls)
    return run


def _section(cls: type[Any]) -> Run:
    """The validator of a schema dataclass: the mapping's keys, `prepare`, the required keys, each field at
    its place, in order, then the dataclass built and its `verify`."""
    fields = schema_fields(cls)
    allowed = file_keys(cls)
    accepted = frozenset(f.key for f in fields) if cls.named else frozenset(allowed)  # + Named's name
    null_default = frozenset(f.key for f in fields if f.null_is_default)
    # A required key with a reason of its own is missing when absent or null; another (one that `prepare`
    # derives) only when absent: a null is then its check's to refuse.
    required = [(f.key, f.doc.required if f.doc and f.doc.required else "is required",
                 bool(f.doc and f.doc.required)) for f in fields if f.default is dataclasses.MISSING]
    runs = [(f.key, f.name, _field(cls, f)) for f in fields]
    prepare, verify = cls.prepare, cls.verify

    def run(value: object, at: tuple[Step, ...]) -> Any:
        try:
            raw = mapping(value)
            for key in raw:
                if key not in accepted:
                    raise Invalid(unknown_key(key, allowed))
            data = prepare({k: v for k, v in raw.items() if not (v is None and k in null_default)})
            for key, reason, null_missing in required:
                if key not in data or (null_missing and data[key] is None):
                    raise Invalid(reason, (key,))
        except ValueError as exc:
            raise refused(at, exc) from None
        values = {}
        for key, name, check in runs:
            if key in data:
                values[name] = data[key] if check is None else check(data[key], (*at, key))
        try:
            return verify(cls(**values), raw)
        except ValueError as exc:
            raise refused(at, exc) from None

    return run


def _field(cls: type[Any], f: Field) -> Run | None:
    """How one field's value is checked: by its check, as a list of entries or named entries, as a section;
    None for a named entry's ``name``, which its key gave (a non-empty string, checked by `_named`)."""
    if isinstance(f.check, Check):
        return _leaf(f.check)
    inner = get_args(f.annotation)[0] if getattr(f.annotation, "__metadata__", ()) else f.annotation
    if isinstance(f.check, Entries):
        return _entries(f.check, _validator(get_args(inner)[0]))
    if isinstance(f.check, Named):
        entry = get_args(inner)[1]
        return _named(f.check, _validator(entry), file_keys(entry))
    section = section_type(f.annotation)
    if section is not None:
        return _validator(section)
    if cls.named and f.name == "name":
        return None
    raise TypeError(f"{cls.__name__}.{f.name} has no check: give it one (a fields.Check)")


def _leaf(check: Check) -> Run:
    def run(value: object, at: tuple[Step, ...]) -> Any:
        try:
            return check(value)
        except ValueError as exc:
            raise refused(at, exc) from None

    return run


def _entries(spec: Entries, entry: Run) -> Run:
    """A list of entries, ``entry`` the validator of one; refuses an empty list when ``spec.empty`` says
    why, and two entries of the same ``spec.unique`` (at the second, naming the first)."""
    key = yaml_key(spec.unique)
    unique, noun, empty = spec.unique, spec.noun, spec.empty

    def run(value: object, at: tuple[Step, ...]) -> tuple[Any, ...]:
        try:
            items = listed(value)
            if not items and empty:
                raise Invalid(empty)
        except ValueError as exc:
            raise refused(at, exc) from None
        entries = tuple([entry(item, (*at, i)) for i, item in enumerate(items)])
        seen: dict[Any, int] = {}
        for i, built in enumerate(entries):
            name = getattr(built, unique)
            if name in seen:
                reason = naming(f"duplicate {noun} {name!r} (also ", (seen[name],), ")")
                raise refused(at, Invalid(reason, (i, key)))
            seen[name] = i
        return entries

    return run


def _named(spec: Named, entry: Run, entry_keys: tuple[str, ...]) -> Run:
    """A mapping of names to entries, ``entry`` the validator of one (whose file keys are ``entry_keys``):
    the names are checked first, all of them, then each entry gets its name and is validated."""
    noun, check_name, name_reason = spec.noun, spec.name, spec.name_reason

    def run(value: object, at: tuple[Step, ...]) -> Mapping[str, Any]:
        bodies = {}
        try:
            for name, body in mapping(value).items():
                if not isinstance(name, str) or not name:
                    raise Invalid(f"{noun} names must be non-empty strings, got {show(name)}")
                if check_name is not None and not check_name(name):
                    raise Invalid(f"{name_reason}, got {name!r}")
                body = {} if body is None else body
                if isinstance(body, Mapping):
                    if "name" in body:
                        raise Invalid(unknown_key("name", entry_keys), (name,))
                    body = {**body, "name": name}
                bodies[name] = body
        except ValueError as exc:
            raise refused(at, exc) from None
        return FrozenMap({name: entry(body, (*at, name)) for name, body in bodies.items()})

    return run
