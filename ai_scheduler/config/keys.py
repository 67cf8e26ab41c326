"""Every key of the config file by its dotted path, and the keys in which two configs differ.

Both are derived from the schema's dataclasses, not from a list kept by hand:
a field of a settings dataclass is the file's key of the same name in
camelCase (``gang_schedule_timeout_seconds`` is ``gangScheduleTimeoutSeconds``),
a ``tuple`` of dataclasses is a list of entries (``profiles``, ``queues``), a
``Mapping`` is keyed by names the operator chooses (``groups``, a quota's
resources), and anything else is a leaf (a scalar, or a list of scalars such as
``filters``). An entry of a named mapping takes its ``name`` field from its key,
so that field is no key of the file. A key added to the schema therefore shows
up here with nothing else to edit, and whoever reloads the config (the daemon)
must say whether it applies that key live: its reload test is generated from
``leaf_keys()``. That answer is written with the setting, too: a field whose
``Doc`` says ``restart=`` (or that lies in a section whose ``Doc`` does) waits for
a restart, and ``restart_required()`` lists those keys; every other key applies
at once.

Two spellings are used:

- a *path* names one place in one file, as ``ConfigError`` does:
  ``scheduling.gangScheduleTimeoutSeconds``, ``profiles[0].scores[1].weight``,
  ``groups.vision.max['nvidia.com/gpu']``;
- a *key* is the schema key a path is an instance of, with ``[*]`` for a list
  index and ``*`` for a name: ``profiles[*].scores[*].weight``,
  ``groups.*.max.*``. What a reload does is decided per key.

``changed_keys`` reports leaves whose values differ, and an entry (a profile,
a queue, a group...) present in only one of the two configs once, by the
entry's own path, rather than once per leaf inside it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, get_args, get_origin, get_type_hints

from ai_scheduler.config.fields import schema_fields, yaml_key
from ai_scheduler.config.schema import Config, _child

ANY_INDEX = "[*]"  # a list index, in a key
ANY_NAME = "*"  # a name the operator chooses, in a key

_SECTION, _ENTRIES, _NAMES, _LEAF = "section", "entries", "names", "leaf"


@dataclass(frozen=True, slots=True)
class Change:
    """Where two configs differ: ``path`` in the file, and the schema ``key`` it is an instance of."""

    path: str
    key: str


__all__ = ["ANY_INDEX", "ANY_NAME", "Change", "changed_keys", "leaf_keys", "restart_required", "within",
           "yaml_key"]


def _join(key: str, child: str) -> str:
    return f"{key}.{child}" if key else child


@cache
def _fields(cls: type[Any], named: bool) -> tuple[tuple[str, str, Any], ...]:
    """(file key, attribute, type) of a dataclass's fields; an entry of a named mapping has no ``name``."""
    hints = get_type_hints(cls)
    return tuple(
        (yaml_key(f.name), f.name, hints[f.name])
        for f in dataclasses.fields(cls)
        if not (named and f.name == "name")
    )


def _shape(annotation: Any) -> tuple[str, Any]:
    """What an annotated field is in the file: a section (a dataclass), a list of entries, a mapping of
    names to values, or a leaf; with the type of the section, of the entries or of the values."""
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return _SECTION, annotation
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = args[0]
        if isinstance(item, type) and dataclasses.is_dataclass(item):
            return _ENTRIES, item
    if origin is Mapping:
        return _NAMES, args[1]
    return _LEAF, None


@cache
def leaf_keys() -> tuple[str, ...]:
    """Every leaf key of the schema, in the schema's order: ``schedulerName``, ``profiles[*].filters``, ...,
    ``scheduling.bindConcurrency``, ..., ``groups.*.max.*``, ..., ``activePolicy``."""
    keys: list[str] = []

    def walk(annotation: Any, key: str, named: bool) -> None:
        shape, inner = _shape(annotation)
        if shape == _SECTION:
            for child, _, child_type in _fields(inner, named):
                walk(child_type, _join(key, child), False)
        elif shape == _ENTRIES:
            walk(inner, key + ANY_INDEX, False)
        elif shape == _NAMES:
            walk(inner, _join(key, ANY_NAME), True)
        else:
            keys.append(key)

    walk(Config, "", False)
    return tuple(keys)


@cache
def restart_required() -> frozenset[str]:
    """The leaf keys whose change a running daemon cannot apply: their ``Doc`` (or a section's above
    them) says ``restart=``. Every other key applies at once."""
    keys: set[str] = set()

    def walk(cls: type[Any], key: str, named: bool, restart: bool) -> None:
        for f in schema_fields(cls):
            if named and f.name == "name":
                continue
            child_key = _join(key, f.key)
            waits = restart or bool(f.doc and f.doc.restart)
            shape, inner = _shape(get_type_hints(cls)[f.name])
            if shape == _SECTION:
                walk(inner, child_key, False, waits)
            elif shape == _ENTRIES:
                walk(inner, child_key + ANY_INDEX, False, waits)
            elif shape == _NAMES and isinstance(inner, type) and dataclasses.is_dataclass(inner):
                walk(inner, _join(child_key, ANY_NAME), True, waits)
            elif waits:
                keys.update(leaf for leaf in leaf_keys() if within(leaf, child_key))

    walk(Config, "", False, False)
    return frozenset(keys)


def within(leaf: str, key: str) -> bool:
    """Whether a change reported at ``key`` covers the leaf key ``leaf`` (it is that leaf, or an entry
    that holds it)."""
    return leaf == key or leaf.startswith((key + ".", key + "["))


def changed_keys(old: Config, new: Config) -> list[Change]:
    """Where ``new`` differs from ``old``, in the schema's order (defaults count: a key left out of the
    file has its default value)."""
    changes: list[Change] = []

    def walk(annotation: Any, a: Any, b: Any, path: str, key: str, named: bool) -> None:
        shape, inner = _shape(annotation)
        if shape == _SECTION:
            for child, attribute, child_type in _fields(inner, named):
                walk(child_type, getattr(a, attribute), getattr(b, attribute), _child(path, child),
                     _join(key, child), False)
        elif shape == _ENTRIES:
            for i in range(max(len(a), len(b))):
                entry_path, entry_key = f"{path}[{i}]", key + ANY_INDEX
                if i < len(a) and i < len(b):
                    walk(inner, a[i], b[i], entry_path, entry_key, False)
                else:
                    changes.append(Change(entry_path, entry_key))
        elif shape == _NAMES:
            for name in [*a, *(n for n in b if n not in a)]:
                entry_path, entry_key = _child(path, name), _join(key, ANY_NAME)
                if name in a and name in b:
                    walk(inner, a[name], b[name], entry_path, entry_key, True)
                else:
                    changes.append(Change(entry_path, entry_key))
        elif a != b:
            changes.append(Change(path, key))

    walk(Config, old, new, "", "", False)
    return changes
