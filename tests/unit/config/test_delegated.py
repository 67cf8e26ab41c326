"""GroupQuota and UserQuota objects merged under the config file's tenancy (config/delegated.py)."""

from __future__ import annotations

from typing import Any

from builders import Pod

from ai_scheduler.cache.tenancy import Tenancy
from ai_scheduler.config import parse_config
from ai_scheduler.config.delegated import DelegatedQuotas, merge

GPU = "nvidia.com/gpu"


def group(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec}


def user(namespace: str, name: str, group_name: str, created: str = "2026-12-07T10:00:00Z",
         **spec: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, "creationTimestamp": created},
            "spec": {"group": group_name, **spec}}


def quotas(*objects: tuple[str, dict[str, Any]]) -> DelegatedQuotas:
    held = DelegatedQuotas()
    for kind, obj in objects:
        held.apply(kind, "ADDED", obj)
    return held


def test_group_and_user_quotas_become_the_tenancy_of_the_users_namespaces() -> None:
    held = quotas(("GroupQuota", group("vision", level=2, max={GPU: 8}, min={GPU: "2"})),
                  ("UserQuota", user("team-a", "alice", "vision", max={GPU: 4})),
                  ("UserQuota", user("team-b", "bob", "vision", "2026-12-07T11:00:00Z", max={GPU: 3})))
    merged = merge(parse_config({}), held)
    config = merged.config
    assert (config.groups["vision"].level, dict(config.groups["vision"].max)) == (2, {GPU: 8})
    assert (config.users["alice"].group, dict(config.users["alice"].max)) == ("vision", {GPU: 4})
    assert config.namespaces["team-b"].user == "bob"
    assert dict(merged.allocated["vision"]) == {GPU: 7}
    assert all(outcome.applied for outcome in merged.outcomes.values())
    tenancy = Tenancy(config)
    alice = tenancy.tenant_of(Pod("p", namespace="team-a", gpus=5).uid().record())
    assert (alice.user, alice.group) == ("alice", "vision")
    assert tenancy.quota_refusal(alice, {GPU: 5}).startswith("exceeds quota of user alice")


def test_a_user_max_above_what_the_group_has_left_is_cut_to_it_and_said() -> None:
    held = quotas(("GroupQuota", group("vision", max={GPU: 8})),
                  ("UserQuota", user("team-a", "alice", "vision", max={GPU: 6})),
                  ("UserQuota", user("team-b", "bob", "vision", "2026-12-07T11:00:00Z", max={GPU: 4})))
    merged = merge(parse_config({}), held)
    bob = merged.outcomes["team-b/bob"]
    assert not bob.applied and dict(bob.max) == {GPU: 2}
    assert bob.reason == ("above what group vision has left: nvidia.com/gpu 4 asked, 2 left of the group's "
                          "8; limited to what is left")
    assert dict(merged.config.users["bob"].max) == {GPU: 2}  # the group's max holds whatever was written
    assert dict(merged.allocated["vision"]) == {GPU: 8}
    # alice gives 2 back: bob gets what he asked.
    held.apply("UserQuota", "MODIFIED", user("team-a", "alice", "vision", max={GPU: 4}))
    assert merge(parse_config({}), held).outcomes["team-b/bob"].applied


def test_the_config_file_wins_and_what_cannot_be_used_is_refused_with_the_reason() -> None:
    config = parse_config({"groups": {"vision": {"max": {GPU: 4}}}, "users": {"carol": {"group": "vision"}},
                           "namespaces": {"team-c": {"user": "carol"}}})
    held = quotas(("GroupQuota", group("vision", max={GPU: 100})),
                  ("UserQuota", user("team-c", "dave", "vision")),
                  ("UserQuota", user("team-d", "carol", "vision")),
                  ("UserQuota", user("team-e", "erin", "nlp")),
                  ("UserQuota", user("team-f", "frank", "vision", max={GPU: "lots"})))
    merged = merge(config, held)
    assert merged.ignored_groups == {"vision": "group vision is defined in the config file, which wins"}
    assert dict(merged.config.groups["vision"].max) == {GPU: 4}
    reasons = {key: outcome.reason for key, outcome in merged.outcomes.items()}
    assert reasons == {
        "team-c/dave": "namespace team-c already belongs to user carol",
        "team-d/carol": "user carol is already defined (by the config file or an earlier UserQuota)",
        "team-e/erin": "group nlp is neither a GroupQuota nor in the config file",
    }
    assert held.errors == {"UserQuota/team-f/frank": "spec.max['nvidia.com/gpu']: invalid quantity 'lots'"}
    assert "team-e" not in merged.config.namespaces


def test_objects_come_and_go() -> None:
    held = DelegatedQuotas()
    assert held.apply("GroupQuota", "ADDED", group("vision", max={GPU: 8}))
    assert not held.apply("GroupQuota", "MODIFIED", group("vision", max={GPU: 8}))  # nothing changed
    assert held.replace("UserQuota", [user("team-a", "alice", "vision")])
    assert held.apply("GroupQuota", "DELETED", group("vision"))
    merged = merge(parse_config({}), held)
    reason = merged.outcomes["team-a/alice"].reason
    assert reason == "group vision is neither a GroupQuota nor in the config file"
