"""How long the config takes to load and validate, and what it adds to the daemon's start.

Three figures, each the median of N runs:

- *validate*: `parse_config` of already-decoded YAML, for the shipped default.yaml and for a large
  config (many profiles, queues, groups, users, namespaces and policies), with the schema of this
  tree and, for comparison, with the hand-written parser of another revision (``--before``, read
  from git into a temporary module: ``main`` by default, ``none`` to skip);
- *load*: `load_config` of the same two files, YAML decoding included (the same loader both ways);
- *first use*, in a fresh interpreter each run, this tree's and ``--before``'s in turn: importing
  ``ai_scheduler.config`` and validating the first file, which is when the validation module is
  imported, the schema's annotations evaluated and its validators made (the daemon pays this once, at
  start). Without cached bytecode (PYTHONDONTWRITEBYTECODE set, as in this repository's dev
  environment) both include compiling the package's sources.

    python benchmarks/config_load.py [--runs 30] [--before main]
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_YAML = ROOT / "ai_scheduler" / "config" / "default.yaml"


def large_config(scale: int = 1) -> dict[str, Any]:
    """A config as a big multi-tenant cluster might have it: 10 profiles, 500 queues, 200 groups, 2,000
    users, 1,000 namespaces and 50 policies (times ``scale``)."""
    limits = {"nvidia.com/gpu": 64, "cpu": "512", "memory": "4Ti"}
    groups = {f"g{i}": {"level": i % 10, "share": 1 + i % 3, "min": {"nvidia.com/gpu": 4, "cpu": "32"},
                        "max": limits} for i in range(200 * scale)}
    users = {f"u{i}": {"group": f"g{i % (200 * scale)}", "level": i % 5, "max": {"nvidia.com/gpu": 4}}
             for i in range(2000 * scale)}
    return {
        "profiles": [{"schedulerName": f"profile-{i}", "scores": [
            {"name": "NodeResourcesMostAllocated", "weight": 2, "resources": {"cpu": 1, "nvidia.com/gpu": 3}},
            {"name": "GPUBinpack", "weight": 3}, {"name": "TaintToleration", "weight": 1}]}
            for i in range(10)],
        "scheduling": {"bindConcurrency": 32, "initialBackoffSeconds": 0.5, "maxBackoffSeconds": 20},
        "queues": [{"name": f"q{i}", "level": i % 4, "weight": 1.5, "promoteAfterSeconds": 600,
                    "quota": {"nvidia.com/gpu": 64, "cpu": "256"}} for i in range(500 * scale)],
        "groups": groups,
        "users": users,
        "namespaces": {f"ns-{i}": {"user": f"u{i}", "defaultQueue": f"q{i % (500 * scale)}"}
                       for i in range(1000 * scale)},
        "policies": {f"p{i}": {"weights": {"fairShare": 2, "waitingTime": 0.5, "jobSize": -1},
                               "maxWaitSeconds": 600} for i in range(50)},
        "activePolicy": "p0",
    }


def median_ms(run: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def old_parser(revision: str) -> ModuleType | None:
    """``parse_config`` of ``revision``'s schema.py, loaded from a temporary file (None: not found)."""
    shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{revision}:ai_scheduler/config/schema.py"],
                           capture_output=True, text=True, check=False)
    if shown.returncode != 0:
        print(f"(no schema.py at {revision!r}: {shown.stderr.strip()})")
        return None
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(shown.stdout)
    spec = importlib.util.spec_from_file_location("old_config_schema", f.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    Path(f.name).unlink()
    return module


FIRST_USE = """
import sys, time
if len(sys.argv) > 1:  # another revision's tree: first on the path, and the editable install's finder out
    sys.path.insert(0, sys.argv[1])
    sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith("__editable__")]
start = time.perf_counter()
import ai_scheduler.config
imported = time.perf_counter()
ai_scheduler.config.parse_config({})
print(imported - start, time.perf_counter() - imported)
assert ai_scheduler.config.__file__.startswith(sys.argv[1] if len(sys.argv) > 1 else "")
"""


def first_use(runs: int, trees: dict[str, Path | None]) -> dict[str, tuple[float, float]]:
    """Medians (ms) of importing ai_scheduler.config, and of its first validation, in fresh interpreters;
    for each of ``trees``: the package of another revision's tree (put first on the path), or this one's
    (None). The trees take turns, run after run, so that a shared machine's load falls on each alike."""
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in trees}
    for _ in range(runs):
        for name, tree in trees.items():
            extra = [str(tree)] if tree is not None else []
            out = subprocess.run([sys.executable, "-c", FIRST_USE, *extra], capture_output=True, text=True,
                                 check=True)
            imported, first = (float(x) for x in out.stdout.split())
            times[name][0].append(imported)
            times[name][1].append(first)
    return {name: (statistics.median(imports) * 1000, statistics.median(firsts) * 1000)
            for name, (imports, firsts) in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--before", default="main", help="the revision to compare with ('none': skip)")
    args = parser.parse_args()

    from ai_scheduler.config import load_config, parse_config

    old = None if args.before == "none" else old_parser(args.before)
    default = yaml.safe_load(DEFAULT_YAML.read_text())
    large = large_config()
    print(f"validate (parse_config of decoded YAML), median of {args.runs}:")
    for name, data in (("default.yaml", default), ("large config", large)):
        parse_config(data)  # the validator is built at first use: measured below
        new_ms = median_ms(functools.partial(parse_config, data), args.runs)
        line = f"  {name:13} schema {new_ms:8.3f} ms"
        if old is not None:
            assert old.parse_config(data) is not None
            old_ms = median_ms(functools.partial(old.parse_config, data), args.runs)
            line += f"   {args.before} {old_ms:8.3f} ms   ({new_ms / old_ms:.2f}x)"
        print(line)
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "large.yaml"
        big.write_text(yaml.safe_dump(large))
        print(f"load (load_config: read, YAML, validate), median of {max(3, args.runs // 5)}:")
        for name, path in (("default.yaml", DEFAULT_YAML), ("large config", big)):
            ms = median_ms(functools.partial(load_config, path), max(3, args.runs // 5))
            print(f"  {name:13} {ms:8.3f} ms")
    runs = max(3, args.runs // 5)
    print(f"first use in a fresh interpreter (import ai_scheduler.config, then the first parse_config: "
          f"the validators made), median of {runs}:")
    with tempfile.TemporaryDirectory() as tree:
        trees: dict[str, Path | None] = {"schema": None}
        if old is not None:
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.before, "ai_scheduler"],
                                     capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
            trees[args.before] = Path(tree)
        for name, (imported, first) in first_use(runs, trees).items():
            print(f"  {name:13} import {imported:6.1f} ms   first parse {first:6.1f} ms")


if __name__ == "__main__":
    main()
