"""default.yaml, the ConfigMap that ships it and the docs' table of settings, written from the schema.

``python -m ai_scheduler.config.generate`` writes them; ``--check`` writes
nothing and exits 1 when a file differs from what it would write (a test runs
the same comparison). Nothing of these files is edited by hand but the
ConfigMap's header (everything above its ``config.yaml: |`` line) and the prose
around the table in ``docs/reference/configuration.md`` (the table lies between
two marker comments).

``default.yaml`` is the default Config written out (``Config`` as built from an
empty file), every setting under its text from the schema (`fields.Doc`), what
it allows and, for the few that need one, that a change waits for a restart.
Collections empty by default (queues, groups, users, namespaces) are shown with
a commented example, whose entries carry their fields' texts. In a list of
entries (profiles, a profile's scores) the first entry carries them. The table
has one row per key of the file, entries' keys included, with the same texts.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

import yaml

from ai_scheduler.config.fields import Check, Entries, Field, Named, Section, schema_fields, whole
from ai_scheduler.config.schema import Config, parse_config

WIDTH = 78  # of default.yaml's comments
PACKAGE = Path(__file__).resolve().parent
DEFAULT_YAML = Path("ai_scheduler/config/default.yaml")
CONFIGMAP = Path("deploy/configmap.yaml")
REFERENCE = Path("docs/reference/configuration.md")
TABLE_BEGIN = ("<!-- The settings' table, generated from ai_scheduler/config/schema.py by "
               "`python -m ai_scheduler.config.generate`: edit the schema, not the table. -->")
TABLE_END = "<!-- End of the generated table. -->"
CONFIGMAP_DATA = "  config.yaml: |\n"

PREAMBLE = """\
# ai-scheduler configuration: the defaults, with every key spelled out.
#
# Every key is optional; an omitted key takes the value shown here. Unknown
# keys, wrong types and out-of-range values are refused with a message that
# names the key. The file is re-read when it changes; a running scheduler that
# finds the new file invalid keeps its last good config. A few keys (each says
# so) need a restart: until then the scheduler runs with their old values.
#
# Generated from ai_scheduler/config/schema.py by
# `python -m ai_scheduler.config.generate`: edit the schema, not this file.
"""


# --- the file's data, from the dataclasses -------------------------------------------------------------


def _inner(f: Field) -> Any:
    """The type inside a field's Annotated (a section's class, ``tuple[Entry, ...]``, ...)."""
    return get_args(f.annotation)[0]


def _entry_class(f: Field) -> type[Section]:
    """The entry type of a list of entries (``tuple[Entry, ...]``) or of a named mapping."""
    args = get_args(_inner(f))
    entry: type[Section] = args[0] if isinstance(f.check, Entries) else args[1]
    return entry


def _is_section(f: Field) -> bool:
    inner = _inner(f)
    return isinstance(inner, type) and issubclass(inner, Section)


def _shown(f: Field) -> bool:
    """A required field with a default in words (a profile's schedulerName) is not written: it is derived."""
    return not (f.default is dataclasses.MISSING and f.doc is not None and f.doc.default is not None
                and f.doc.required is not None)


def _plain(value: Any) -> Any:
    """A value of a dataclass as the file writes it: tuples as lists, read-only maps as dicts, 10.0 as 10."""
    if isinstance(value, Section):
        return _data(value)
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return whole(value) if isinstance(value, float) else value


def _data(section: Section, in_list: bool = False) -> dict[str, Any]:
    data = {}
    for f in schema_fields(type(section)):
        if (type(section).named and f.name == "name") or not _shown(f):
            continue
        value = getattr(section, f.name)
        if in_list and isinstance(value, Mapping | tuple) and not value:
            continue  # an entry's empty collection says nothing: NodeAffinity's resources
        data[f.key] = _plain(value)
    for f in schema_fields(type(section)):
        if isinstance(f.check, Entries) and f.key in data:
            data[f.key] = [_data(entry, in_list=True) for entry in getattr(section, f.name)]
    return data


# --- default.yaml --------------------------------------------------------------------------------------


def _scalar(value: Any) -> str:
    if value == "":
        return '""'
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10_000)
    return text.removesuffix("\n").removesuffix("\n...").removesuffix("...").strip()


def _comment(text: str, indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    for i, paragraph in enumerate(text.split("\n\n")):
        if i:
            lines.append(f"{pad}#")
        kept = re.sub(r"(>=?|<=?) ", lambda m: m.group(1) + _KEEP, paragraph)  # "> 0" stays on one line
        lines += [line.replace(_KEEP, " ") for line in textwrap.wrap(
            kept, WIDTH - indent - 2, initial_indent=f"{pad}# ", subsequent_indent=f"{pad}# ",
            break_on_hyphens=False, break_long_words=False)]
    return lines


_KEEP = "\x00"  # a space the wrapping does not break at


def _described(f: Field) -> str:
    """A field's text in default.yaml: its doc, what it allows, and whether a change needs a restart."""
    assert f.doc is not None, f"{f.key} has no Doc"
    text = f.doc.text
    if isinstance(f.check, Check):
        text += f" Allowed: {f.check.describe().replace('`', '')}."
    if f.doc.restart:
        text += f" A change needs a restart: {f.doc.restart}."
    return text


def _render_fields(cls: type[Section], data: Mapping[str, Any], indent: int, docs: bool) -> list[str]:
    lines: list[str] = []
    for f in schema_fields(cls):
        if cls.named and f.name == "name":
            continue
        if f.key not in data:
            if docs and f.doc is not None:
                lines += [*_comment(f"{f.key}: {_described(f)}", indent), " " * indent + "#"]
            continue
        if docs:
            lines += _comment(_described(f), indent)
        lines += _render_value(f, data[f.key], indent, docs)
    return lines


def _render_value(f: Field, value: Any, indent: int, docs: bool) -> list[str]:
    pad = " " * indent
    if _is_section(f):
        return [f"{pad}{f.key}:", *_render_fields(_inner(f), value, indent + 2, docs)]
    if isinstance(f.check, Entries):
        if not value:
            return [f"{pad}{f.key}: []"]
        lines = [f"{pad}{f.key}:"]
        for i, entry in enumerate(value):
            body = _render_fields(_entry_class(f), entry, indent + 4, docs and i == 0)
            lines += [f"{pad}  - {body[0].lstrip()}", *body[1:]]
        return lines
    if isinstance(f.check, Named):
        if not value:
            return [f"{pad}{f.key}: {{}}"]
        lines = [f"{pad}{f.key}:"]
        for i, (name, entry) in enumerate(value.items()):
            lines += [f"{pad}  {_scalar(name)}:",
                      *_render_fields(_entry_class(f), entry, indent + 4, docs and i == 0)]
        return lines
    if isinstance(value, Mapping):
        if not value:
            return [f"{pad}{f.key}: {{}}"]
        return [f"{pad}{f.key}:", *(f"{pad}  {_scalar(k)}: {_scalar(v)}" for k, v in value.items())]
    if isinstance(value, list):
        if not value:
            return [f"{pad}{f.key}: []"]
        return [f"{pad}{f.key}:", *(f"{pad}  - {_scalar(v)}" for v in value)]
    return [f"{pad}{f.key}: {_scalar(value)}"]


def default_yaml() -> str:
    """default.yaml's text: the default Config, every key under its text."""
    data = _data(parse_config({}))  # the Config of an empty file, less what is derived
    lines = [PREAMBLE.rstrip("\n")]
    for f in schema_fields(Config):
        assert f.doc is not None, f"{f.key} has no Doc"
        lines.append("")
        if f.doc.preface:
            lines += _comment(f.doc.preface, 0)
            lines.append("")
        lines += _comment(_described(f), 0)
        if f.doc.example is not None:
            example = _render_value(f, f.doc.example, 0, True)[1:]  # without the key's own line
            lines += [f"# {line}" for line in example]
        lines += _render_value(f, data[f.key], 0, True)
    return "\n".join(lines) + "\n"


def configmap(current: str) -> str:
    """deploy/configmap.yaml: its hand-written header, then default.yaml as the data's config.yaml."""
    head, found, _ = current.partition(CONFIGMAP_DATA)
    if not found:
        raise ValueError(f"{CONFIGMAP} has no line {CONFIGMAP_DATA.strip()!r}")
    lines = default_yaml().splitlines(keepends=True)
    body = "".join(f"    {line}" if line.strip() else line for line in lines)
    return head + CONFIGMAP_DATA + body


# --- the docs' table -----------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default_cell(f: Field) -> str:
    if f.doc is not None and f.doc.default is not None:
        return f.doc.default
    if f.default is dataclasses.MISSING:
        return "required"
    value = _plain(f.default)
    if isinstance(value, dict | list):
        return _scalar(value) if value else ("{}" if isinstance(value, dict) else "[]")
    return f"`{_scalar(value)}`"


def _rows(cls: type[Section], prefix: str, restart: str | None) -> list[str]:
    rows = []
    for f in schema_fields(cls):
        if cls.named and f.name == "name":
            continue
        assert f.doc is not None, f"{prefix}{f.key} has no Doc"
        key = f"{prefix}{f.key}"
        waits = f.doc.restart or restart
        if _is_section(f):
            rows += _rows(_inner(f), f"{key}.", waits)
            continue
        allowed = f.check.describe() if isinstance(f.check, Check) else ""
        if isinstance(f.check, Entries):
            allowed = "list"
        elif isinstance(f.check, Named):
            allowed = "name -> entry"
        meaning = f.doc.text + (f" Needs a restart: {waits}." if waits else "")
        reload = "restart" if waits else "at once"
        cells = [f"`{key}`", _default_cell(f), allowed, reload, meaning]
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        if isinstance(f.check, Entries):
            rows += _rows(_entry_class(f), f"{key}[].", waits)
        elif isinstance(f.check, Named):
            rows += _rows(_entry_class(f), f"{key}.<name>.", waits)
    return rows


def table() -> str:
    """The Markdown table of every key, between its markers."""
    header = ["| key | default | allowed | reload | meaning |", "|---|---|---|---|---|"]
    return "\n".join([TABLE_BEGIN, *header, *_rows(Config, "", None), TABLE_END]) + "\n"


def reference(current: str) -> str:
    """docs/reference/configuration.md with its table written again; the prose around it as it is."""
    before, found, rest = current.partition(TABLE_BEGIN)
    _, found_end, after = rest.partition(TABLE_END + "\n")
    if not found or not found_end:
        raise ValueError(f"{REFERENCE} lacks the table's markers")
    return before + table() + after


# --- the command ---------------------------------------------------------------------------------------


def outputs(root: Path) -> dict[Path, str]:
    """Each generated file under the repository ``root``, with the text it should have."""
    return {
        root / DEFAULT_YAML: default_yaml(),
        root / CONFIGMAP: configmap((root / CONFIGMAP).read_text()),
        root / REFERENCE: reference((root / REFERENCE).read_text()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ai_scheduler.config.generate", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file differs")
    parser.add_argument("--root", type=Path, default=PACKAGE.parent.parent,
                        help="the repository's root (default: the one this package lies in)")
    args = parser.parse_args(argv)
    stale = []
    for path, text in outputs(args.root).items():
        if path.read_text() == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(text)
    for path in stale:
        print(f"{'differs' if args.check else 'written'}: {path.relative_to(args.root)}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
