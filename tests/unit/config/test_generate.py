"""The files generated from the config schema (default.yaml, the ConfigMap, the docs' table) are up to date,
and the schema says of every setting what they need."""

from __future__ import annotations

from pathlib import Path

import yaml
from paths import ROOT

from ai_scheduler.config import default_config, generate, parse_config, schema
from ai_scheduler.config.fields import Section, schema_fields
from ai_scheduler.config.keys import restart_required


def test_generated_files_match_the_schema() -> None:
    stale = [str(path.relative_to(ROOT)) for path, text in generate.outputs(ROOT).items()
             if path.read_text() != text]
    assert not stale, f"run `python -m ai_scheduler.config.generate`: {', '.join(stale)} differ"


def test_the_generator_check_mode_agrees(tmp_path: Path) -> None:
    assert generate.main(["--check", "--root", str(ROOT)]) == 0
    for path in (generate.DEFAULT_YAML, generate.CONFIGMAP, generate.REFERENCE):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text((ROOT / path).read_text())
    (tmp_path / generate.DEFAULT_YAML).write_text("schedulerName: edited-by-hand\n")
    assert generate.main(["--check", "--root", str(tmp_path)]) == 1
    assert generate.main(["--root", str(tmp_path)]) == 0
    assert (tmp_path / generate.DEFAULT_YAML).read_text() == (ROOT / generate.DEFAULT_YAML).read_text()


def test_default_yaml_holds_the_defaults() -> None:
    data = yaml.safe_load(generate.default_yaml())
    assert parse_config(data) == default_config() == parse_config({})


def test_every_setting_has_its_text() -> None:
    classes = [c for c in vars(schema).values()
               if isinstance(c, type) and issubclass(c, Section) and c is not Section]
    assert len(classes) == 16
    missing = [f"{c.__name__}.{f.name}" for c in classes for f in schema_fields(c)
               if not (c.named and f.name == "name") and (f.doc is None or not f.doc.text)]
    assert missing == []


def test_the_keys_that_need_a_restart_are_those_of_before_the_schema_said_so() -> None:
    assert restart_required() == {
        "server.port", "server.bindAddress", "server.visibilityEnabled", "server.visibilityPort",
        "server.visibilityCertFile", "server.visibilityKeyFile", "scheduling.bindConcurrency",
        "leaderElection.enabled", "leaderElection.leaseName", "leaderElection.leaseNamespace",
        "leaderElection.leaseDurationSeconds", "leaderElection.renewDeadlineSeconds",
        "leaderElection.retryPeriodSeconds", "accounting.database",
    }


def test_the_table_has_a_row_for_every_key() -> None:
    table = generate.table()
    for key in ("scheduling.apiRequestTimeoutSeconds", "scheduling.watchIdleSeconds",
                "scheduling.apiUnreachableRestartSeconds", "queues[].promoteAfterSeconds",
                "groups.<name>.max", "policies.<name>.weights", "server.visibilityKeyFile"):
        assert f"| `{key}` |" in table
