"""Gang identity from every supported declaration, PodGroup specs, and PodGroup status phases."""

from __future__ import annotations

from typing import Any

import pytest
from builders import Pod

from ai_scheduler.cache.gangs import (
    GROUP_MIN_LABEL,
    GROUP_NAME_LABEL,
    KOORDINATOR_MIN,
    KOORDINATOR_NAME,
    LEGACY_POD_GROUP_LABEL,
    POD_GROUP_LABEL,
    GangRegistry,
    PodGroupSpec,
    gang_ref,
)
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.daemon.gang_status import podgroup_status


def gang_pod(name: str = "p", *, labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None,
             phase: str = "Pending", node: str = "", owners: tuple[str, ...] = ()) -> PodRecord:
    return (Pod.bare(name, "ml").uid().labels(labels or {}).annotations(annotations or {})
            .owners(*({"name": owner} for owner in owners)).spec().on(node).phase(phase).record())


@pytest.mark.parametrize(
    ("labels", "annotations", "expected"),
    [
        ({POD_GROUP_LABEL: "g"}, {}, ("ml/g", None, "PodGroup", "")),
        ({LEGACY_POD_GROUP_LABEL: "old"}, {}, ("ml/old", None, "PodGroup", "")),
        ({GROUP_NAME_LABEL: "mpi", GROUP_MIN_LABEL: "3"}, {}, ("ml/mpi", 3, "labels", "")),
        ({}, {KOORDINATOR_NAME: "k", KOORDINATOR_MIN: "2"}, ("ml/k", 2, "koordinator", "")),
        ({GROUP_NAME_LABEL: "named-only"}, {}, ("ml/named-only", None, "PodGroup", "")),
        ({}, {KOORDINATOR_NAME: "k"}, ("ml/k", None, "PodGroup", "")),
        (
            {GROUP_NAME_LABEL: "bad", GROUP_MIN_LABEL: "0"},
            {},
            ("ml/bad", None, "labels", f"{GROUP_MIN_LABEL} must be a positive integer, got '0'"),
        ),
        (
            {GROUP_NAME_LABEL: "bad", GROUP_MIN_LABEL: "x"},
            {},
            ("ml/bad", None, "labels", f"{GROUP_MIN_LABEL} must be a positive integer, got 'x'"),
        ),
        # The PodGroup label wins over the CRD-free labels when a pod carries both.
        (
            {POD_GROUP_LABEL: "crd", GROUP_NAME_LABEL: "x", GROUP_MIN_LABEL: "2"},
            {},
            ("ml/crd", None, "PodGroup", ""),
        ),
    ],
)
def test_gang_ref_reads_every_declaration(
    labels: dict[str, str], annotations: dict[str, str], expected: tuple[str, int | None, str, str]
) -> None:
    ref = gang_ref(gang_pod(labels=labels, annotations=annotations))
    assert ref is not None
    assert (ref.key, ref.min_member, ref.source, ref.error) == expected


def test_a_lone_pod_has_no_gang() -> None:
    assert gang_ref(gang_pod(labels={"app": "web"})) is None


def test_podgroup_spec_parses_and_reports_bad_fields() -> None:
    good = PodGroupSpec.from_api(
        {
            "metadata": {"uid": "u", "annotations": {"ai-scheduler.io/same-domain": "required"}},
            "spec": {
                "minMember": 4,
                "minResources": {"cpu": "2", "nvidia.com/gpu": 8},
                "scheduleTimeoutSeconds": 30,
            },
        }
    )
    assert (
        good.min_member,
        good.min_resources,
        good.timeout_seconds,
        good.same_domain_required,
        good.error,
    ) == (4, {"cpu": 2000, "nvidia.com/gpu": 8}, 30.0, True, "")
    bad = PodGroupSpec.from_api({"spec": {"minMember": "four", "minResources": {"cpu": "lots"}}})
    assert "spec.minMember must be an integer" in bad.error and "spec.minResources" in bad.error


def test_registry_tracks_members_and_a_missing_podgroup() -> None:
    registry = GangRegistry()
    gang = registry.observe_pod(gang_pod("a", labels={POD_GROUP_LABEL: "g"}))
    assert gang is not None and gang.problem == f"label {POD_GROUP_LABEL}: pod group ml/g not found"
    registry.set_podgroup(
        {"metadata": {"namespace": "ml", "name": "g", "uid": "pg"}, "spec": {"minMember": 2}}
    )
    assert gang.problem == "" and gang.min_member == 2
    registry.observe_pod(gang_pod("b", labels={POD_GROUP_LABEL: "g"}))
    assert set(gang.members) == {"uid-a", "uid-b"}
    # A pod relabelled out of the gang leaves it.
    registry.observe_pod(gang_pod("b", labels={}))
    assert set(gang.members) == {"uid-a"}
    registry.forget_pod("uid-a")
    registry.remove_podgroup({"metadata": {"namespace": "ml", "name": "g"}})
    assert "ml/g" not in registry.gangs


def _gang_with(*members: PodRecord, min_member: int = 2, started: bool = False) -> Any:
    registry = GangRegistry()
    registry.set_podgroup(
        {"metadata": {"namespace": "ml", "name": "g", "uid": "pg"}, "spec": {"minMember": min_member}}
    )
    for member in members:
        registry.observe_pod(member)
    gang = registry.gangs["ml/g"]
    if started:
        gang.schedule_start = 1_700_000_000.0
    return gang


G = {POD_GROUP_LABEL: "g"}


@pytest.mark.parametrize(
    ("members", "started", "phase"),
    [
        ((gang_pod("a", labels=G),), False, "Pending"),
        ((gang_pod("a", labels=G), gang_pod("b", labels=G)), False, "PreScheduling"),
        ((gang_pod("a", labels=G), gang_pod("b", labels=G)), True, "Scheduling"),
        ((gang_pod("a", labels=G, node="n"), gang_pod("b", labels=G)), True, "Scheduling"),
        ((gang_pod("a", labels=G, node="n"), gang_pod("b", labels=G, node="n")), True, "Scheduled"),
        (
            (gang_pod("a", labels=G, node="n", phase="Running"),
             gang_pod("b", labels=G, node="n", phase="Running")),
            True,
            "Running",
        ),
        (
            (
                gang_pod("a", labels=G, node="n", phase="Succeeded"),
                gang_pod("b", labels=G, node="n", phase="Succeeded"),
            ),
            True,
            "Finished",
        ),
        (
            (gang_pod("a", labels=G, node="n", phase="Failed"),
             gang_pod("b", labels=G, node="n", phase="Running")),
            True,
            "Failed",
        ),
    ],
)
def test_podgroup_phases_follow_scheduler_plugins(
    members: tuple[PodRecord, ...], started: bool, phase: str
) -> None:
    assert podgroup_status(_gang_with(*members, started=started))["phase"] == phase


def test_podgroup_status_fields() -> None:
    gang = _gang_with(
        gang_pod("a", labels=G, node="n", phase="Running", owners=("job-1",)),
        gang_pod("b", labels=G, node="n", phase="Succeeded", owners=("job-1",)),
        started=True,
    )
    status = podgroup_status(gang)
    assert status == {
        "phase": "Running",
        "running": 1,
        "succeeded": 1,
        "failed": 0,
        "occupiedBy": "ml/job-1",
        "scheduleStartTime": "2023-11-14T22:13:20Z",
    }
    gang.failed_reason = "member ml/b could not be bound"
    assert podgroup_status(gang)["phase"] == "Failed"
