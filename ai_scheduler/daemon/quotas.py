"""Delegated quotas in the daemon: the GroupQuota and UserQuota informers, and the statuses the leader writes.

The objects are read on every replica (config/delegated.py merges them under the config file's tenancy,
and the daemon hands the result to the core at once, as a reload does: a group administrator's change
takes effect without a restart). The leader writes back what the merge decided, every `FLUSH_SECONDS`
and only where it changed:

- each UserQuota's `status`: `applied`, the `reason` when it was not applied as written (its group does
  not exist, its namespace or user is taken, its max is above what the group has left), and the
  `effectiveMax` in force;
- each GroupQuota's `status.allocated` (the sum of its users' max) and `status.users`, which the
  admission policy of deploy/quota-delegation.yaml reads to refuse a user's max above what is left, and
  `status.reason` when the config file defines a group of the same name (which wins).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.config.delegated import DelegatedQuotas, Merged
from ai_scheduler.daemon.informer import Informer
from ai_scheduler.log import JsonLogger
from ai_scheduler.quantity import format_units
from ai_scheduler.scheduler.metrics import Metrics

GROUP_QUOTAS = "ai-scheduler.io/v1alpha1/groupquotas"
USER_QUOTAS = "ai-scheduler.io/v1alpha1/userquotas"
FLUSH_SECONDS = 0.5


class QuotaObjects:
    """The objects, their merge's last outcome, and what was last written on each."""

    def __init__(self, client: KubeClient, logger: JsonLogger, metrics: Metrics,
                 changed: Callable[[], None]) -> None:
        """`changed`: called when what is in force may have changed (the daemon merges and applies)."""
        self.client = client
        self.log = logger
        self.metrics = metrics
        self.changed = changed
        self.quotas = DelegatedQuotas()
        self.merged: Merged | None = None
        self._written: dict[str, dict[str, Any]] = {}  # "GroupQuota/NAME" or "UserQuota/NS/NAME" -> status

    def informers(self, build: Callable[..., Informer[Any]]) -> dict[str, Informer[Any]]:
        def on(kind: str) -> tuple[Callable[[str, dict[str, Any]], None], Callable[[list[Any]], None]]:
            def event(event_type: str, obj: dict[str, Any]) -> None:
                if self.quotas.apply(kind, event_type, obj):
                    self.changed()

            def replace(objects: list[Any]) -> None:
                if self.quotas.replace(kind, objects):
                    self.changed()

            return event, replace

        return {GROUP_QUOTAS: build(GROUP_QUOTAS, *on("GroupQuota"), optional=True),
                USER_QUOTAS: build(USER_QUOTAS, *on("UserQuota"), optional=True)}

    def described(self) -> dict[str, Any]:
        """What a log line shows of the last merge."""
        merged = self.merged
        if merged is None:
            return {}
        return {
            "groups": sorted(self.quotas.groups),
            "users": {key: outcome.status() for key, outcome in sorted(merged.outcomes.items())},
            "ignored_groups": dict(merged.ignored_groups),
            "unreadable": dict(self.quotas.errors),
        }

    # ------------------------------------------------------------------ the leader's status writer
    async def run(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            await self.flush()

    def wanted(self) -> dict[str, tuple[str, str, str, dict[str, Any]]]:
        """Each object's status as the last merge has it: key -> (plural, namespace, name, status)."""
        merged = self.merged
        wanted: dict[str, tuple[str, str, str, dict[str, Any]]] = {}
        if merged is None:
            return wanted
        users_of: dict[str, list[str]] = {}
        for user in merged.config.users.values():
            users_of.setdefault(user.group, []).append(user.name)
        for name in self.quotas.groups:
            allocated = merged.allocated.get(name, {})
            status = {"allocated": {r: format_units(r, n) for r, n in sorted(allocated.items())},
                      "users": sorted(users_of.get(name, [])), "reason": merged.ignored_groups.get(name, "")}
            wanted[f"GroupQuota/{name}"] = ("groupquotas", "", name, status)
        for key, quota in self.quotas.users.items():
            outcome = merged.outcomes.get(key)
            if outcome is not None:
                wanted[f"UserQuota/{key}"] = ("userquotas", quota.namespace, quota.name, outcome.status())
        for key, error in self.quotas.errors.items():
            kind, _, rest = key.partition("/")
            namespace, _, name = rest.rpartition("/")
            plural = "groupquotas" if kind == "GroupQuota" else "userquotas"
            wanted[key] = (plural, namespace, name, {"applied": False, "reason": f"cannot be read: {error}"})
        return wanted

    async def flush(self) -> None:
        for key, (plural, namespace, name, status) in self.wanted().items():
            if self._written.get(key) == status:
                continue
            where = f"/namespaces/{namespace}" if namespace else ""
            path = f"/apis/ai-scheduler.io/v1alpha1{where}/{plural}/{name}/status"
            result = await self.client.request("PATCH", path, body={"status": status},
                                               content_type="application/merge-patch+json")
            if result.ok:
                self._written[key] = status
                self.log.info("quota.status", object=key, **status)
            elif result.status == 404:
                self._written.pop(key, None)
            else:
                self.metrics.api_errors.labels("quota_status", str(result.status)).inc()
                self.log.warning("quota.status_failed", object=key, code=result.status, error=result.message)
