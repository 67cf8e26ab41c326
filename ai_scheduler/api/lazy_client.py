"""kubernetes_asyncio's client package, loaded by the name asked for rather than whole.

`kubernetes_asyncio.client` (and its `api` and `models` packages) import every API class and every model
of the Kubernetes API when first imported: about a thousand modules, some 40 MiB of the daemon's
resident memory, which the scheduler never uses (it calls the API classes in raw mode and parses the
JSON itself, api/kube.py). `install` puts these three packages into `sys.modules` without running their
`__init__` files, each with a module `__getattr__` (PEP 562) that imports the one module defining a
name on first use: the map from name to module is read from the package's own `__init__` file (its
`from <module> import <Name>` lines), so that every name the package exports stays reachable, now
imported on demand. Submodules (`kubernetes_asyncio.client.rest`) import as usual. A process that
imported kubernetes_asyncio before `install` keeps the package as it is.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import types
from pathlib import Path
from typing import Any

ROOT = "kubernetes_asyncio"
LAZY_PACKAGES = (f"{ROOT}.client", f"{ROOT}.client.api", f"{ROOT}.client.models")
_EXPORT = re.compile(r"^from (kubernetes_asyncio\.client[\w.]*) import (\w+)\s*$", re.MULTILINE)


def _lazy_package(name: str, directory: Path) -> types.ModuleType:
    init = directory / "__init__.py"
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(directory)])
    assert spec is not None
    package = importlib.util.module_from_spec(spec)  # its __init__ is never run
    exports = {export: module for module, export in _EXPORT.findall(init.read_text(encoding="utf-8"))}
    version = re.search(r'^__version__ = "([^"]*)"', init.read_text(encoding="utf-8"), re.MULTILINE)
    if version:
        package.__version__ = version.group(1)  # type: ignore[attr-defined]

    def __getattr__(attribute: str) -> Any:
        module = exports.get(attribute)
        if module is None:
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}")
        value = getattr(importlib.import_module(module), attribute)
        setattr(package, attribute, value)
        return value

    package.__getattr__ = __getattr__  # type: ignore[method-assign]
    return package


def install() -> bool:
    """Make kubernetes_asyncio's client packages lazy (see the module); False when it was imported
    already (or is not where a package is expected), and nothing changed."""
    if ROOT in sys.modules or any(name in sys.modules for name in LAZY_PACKAGES):
        return False
    spec = importlib.util.find_spec(ROOT)  # finds without importing
    if spec is None or not spec.submodule_search_locations:
        return False
    root = Path(next(iter(spec.submodule_search_locations)))
    packages = {name: root.joinpath(*name.split(".")[1:]) for name in LAZY_PACKAGES}
    if not all((directory / "__init__.py").is_file() for directory in packages.values()):
        return False
    for name, directory in packages.items():
        sys.modules[name] = _lazy_package(name, directory)
    client = sys.modules[LAZY_PACKAGES[0]]
    for name in LAZY_PACKAGES[1:]:  # what importing them would have set on their parent
        setattr(client, name.rpartition(".")[2], sys.modules[name])
    return True
