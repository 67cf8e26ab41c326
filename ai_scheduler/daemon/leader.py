"""Leader election on a coordination.k8s.io Lease: one replica schedules, the others wait warm.

client-go's `leaderelection` (the one kube-scheduler uses), made small for our
raw-JSON client. kubernetes_asyncio ships a port of it, but it works on the
generated model classes (which our client never builds), logs through
`logging`, and cannot release the Lease on shutdown; the part we need is short.

The Lease (`leaderElection.leaseName`, default `ai-scheduler`) lives in
`leaderElection.leaseNamespace`, by default the namespace the daemon runs in
(`POD_NAMESPACE` from the downward API, else kube-system). Its
`spec.holderIdentity` names the leader: `POD_NAME` (else the host name) and a
random suffix, so that a restarted pod of the same name is a new candidate.

- Acquire and renew are one read and one write under the read's
  `resourceVersion` (optimistic concurrency): of two replicas writing at once,
  one gets 409 Conflict, and a 409 is an election lost, never an error. The
  leader renews every `retryPeriodSeconds` with a write alone (the Lease it
  wrote last gives the version), and falls back to a read when that fails.
- A candidate takes the Lease when it is free (no holder) or its holder has not
  renewed it for its `leaseDurationSeconds`. Time is measured on the
  candidate's own monotonic clock from when it first saw the current record
  (its resourceVersion), never by comparing the record's `renewTime` with a
  local wall clock: clocks of two machines may differ. A candidate wakes up at
  the moment the Lease it watches runs out, so a crashed leader is replaced
  about `leaseDurationSeconds` after its last renewal (plus the candidate's
  poll period, `retryPeriodSeconds` at most, in which it may have seen that
  renewal late).
- The leader gives up (`leader.lost`) as soon as another holder is in the
  Lease, or when it has not renewed for `renewDeadlineSeconds` (each attempt
  bounded by what remains of it). That is before the Lease runs out for the
  others (renew deadline < lease duration), so two replicas never act as
  leaders at once. The daemon then stops scheduling at once and exits, as
  kube-scheduler does: restarted, it comes back as a standby.
- On shutdown the leader releases the Lease, as client-go's ReleaseOnCancel:
  holder cleared and a duration of 1 s, so that a standby takes over at its
  next try instead of waiting the Lease out.

Timings default to a 12 s lease, an 8 s renew deadline and a 2 s retry, shorter than
kube-scheduler's 15 s / 10 s so that a crashed leader is replaced within 15 s.

Each replica also labels its own pod (`POD_NAME`, `POD_NAMESPACE` from the
downward API) `ai-scheduler.io/role: standby` when it starts to campaign and
`leader` when it leads, so that the Service of the visibility API selects the
leader alone: a standby has never tried a pod, so it knows no reason and makes
no forecast. A crashed leader keeps its label until it is restarted (then
`standby` is its first write), but it is not ready meanwhile, so the Service
sends nothing to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import math
import os
import random
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from ai_scheduler.api.kube import ApiResult
from ai_scheduler.config import LeaderElectionSettings
from ai_scheduler.log import JsonLogger

DEFAULT_NAMESPACE = "kube-system"
ROLE_LABEL = "ai-scheduler.io/role"  # on the replica's own pod: "leader" or "standby"
JITTER = 1.2  # a candidate's tries are spread over [retry, retry x JITTER], as client-go's JitterUntil


class LeaseApi(Protocol):
    """The Lease calls of KubeClient (api/kube.py)."""

    async def get_lease(self, namespace: str, name: str) -> ApiResult: ...

    async def create_lease(self, namespace: str, lease: dict[str, Any]) -> ApiResult: ...

    async def replace_lease(self, namespace: str, name: str, lease: dict[str, Any]) -> ApiResult: ...


class PodPatcher(Protocol):
    async def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> ApiResult: ...


async def label_own_pod(client: PodPatcher, role: Role, logger: JsonLogger) -> None:
    """Label this replica's pod with its role (see the module); nothing outside a pod (no POD_NAME)."""
    name, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
    if not name or not namespace:
        return
    result = await client.patch_pod(namespace, name, {"metadata": {"labels": {ROLE_LABEL: role.value}}})
    if not result.ok:
        logger.warning("leader.label_failed", pod=f"{namespace}/{name}", role=role.value, code=result.status,
                       error=result.message)


class Role(enum.Enum):
    """Where a replica stands. STANDBY -> LEADER -> LOST (the process must exit) or RELEASED (shutdown)."""

    STANDBY = "standby"
    LEADER = "leader"
    LOST = "lost"
    RELEASED = "released"


class Outcome(enum.Enum):
    """One try at the Lease."""

    OURS = "ours"  # acquired or renewed
    HELD = "held"  # another holder's Lease is still valid
    CONFLICT = "conflict"  # 409: someone else wrote it between our read and our write
    ERROR = "error"  # no answer, or an answer that says nothing about who holds it


def default_identity() -> str:
    """kube-scheduler's: the pod's name (the host name outside a pod) and a unique suffix."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4()}"


def lease_namespace(settings: LeaderElectionSettings) -> str:
    return settings.lease_namespace or os.environ.get("POD_NAMESPACE") or DEFAULT_NAMESPACE


def micro_time(wall: float) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds), as Lease times are written."""
    return datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """What a Lease says about its holder (spec), and the version it was read at."""

    holder: str
    duration: float
    transitions: int
    acquire_time: str | None
    resource_version: str

    @classmethod
    def of(cls, lease: dict[str, Any], default_duration: float) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            duration=float(spec.get("leaseDurationSeconds") or default_duration),
            transitions=int(spec.get("leaseTransitions") or 0),
            acquire_time=spec.get("acquireTime"),
            resource_version=str((lease.get("metadata") or {}).get("resourceVersion", "")),
        )


class LeaderElector:
    """Campaigns for the Lease, then keeps it; `leading` is set while this replica leads, `lost` once it
    lost the Lease (never cleared: the process exits)."""

    def __init__(
        self,
        client: LeaseApi,
        settings: LeaderElectionSettings,
        logger: JsonLogger,
        *,
        identity: str | None = None,
        on_change: Callable[[Role], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.settings = settings
        self.log = logger
        self.identity = identity or default_identity()
        self.name = settings.lease_name
        self.namespace = lease_namespace(settings)
        self.on_change = on_change
        self._clock = clock
        self._wall = wall
        self.role = Role.STANDBY
        self.leading = asyncio.Event()
        self.lost = asyncio.Event()
        self.holder = ""  # the holder last seen in the Lease
        self._lease: dict[str, Any] | None = None  # the Lease as we last wrote it (while we lead)
        self._observed: LeaseRecord | None = None
        self._observed_at = -math.inf  # monotonic: when the observed record was first seen
        self._renewed_at = -math.inf  # monotonic: when our last successful write was sent

    # ------------------------------------------------------------------ the campaign
    async def run(self) -> None:
        """Acquire the Lease (waiting as long as it takes), then renew it until it is lost; returns then.
        Cancelled (shutdown), it leaves the Lease as it is: `release()` gives it up."""
        started = self._clock()
        self.log.info("leader.campaign", identity=self.identity, lease=f"{self.namespace}/{self.name}")
        while await self._try() is not Outcome.OURS:
            await asyncio.sleep(self._next_try())
        assert self._observed is not None
        self.log.info("leader.acquired", identity=self.identity, lease=f"{self.namespace}/{self.name}",
                      transitions=self._observed.transitions, waited=round(self._clock() - started, 3))
        self._set_role(Role.LEADER)
        reason = await self._renew_until_lost()
        self.log.error("leader.lost", identity=self.identity, lease=f"{self.namespace}/{self.name}",
                       reason=reason, holder=self.holder)
        self._set_role(Role.LOST)

    def _next_try(self) -> float:
        """A candidate's wait: the retry period with jitter, or less when the Lease it watches runs out
        sooner (so that it takes over the moment it may)."""
        wait = self.settings.retry_period_seconds * random.uniform(1.0, JITTER)
        if self._observed is not None and self._observed.holder:
            expires_in = self._observed_at + self._observed.duration - self._clock()
            wait = min(wait, max(expires_in, 0.0) + 0.01)
        return wait

    async def _renew_until_lost(self) -> str:
        """Renew every retry period; why leading ended."""
        retry, deadline_after = self.settings.retry_period_seconds, self.settings.renew_deadline_seconds
        while True:
            await asyncio.sleep(retry)
            while True:
                remaining = self._renewed_at + deadline_after - self._clock()
                if remaining <= 0:
                    return f"not renewed within renewDeadlineSeconds ({deadline_after:g} s)"
                try:
                    async with asyncio.timeout(remaining):
                        outcome = await self._try()
                except TimeoutError:
                    continue  # the deadline has passed: the next turn says so
                if outcome is Outcome.OURS:
                    break
                if outcome is Outcome.HELD:
                    return "another holder took the Lease"
                await asyncio.sleep(min(retry, max(remaining - 0.01, 0.0)))

    async def _try(self) -> Outcome:
        """client-go's tryAcquireOrRenew. The leader writes its last Lease back renewed (one request); a
        candidate, or a leader whose write failed, reads the Lease first."""
        if self.role is Role.LEADER and self._lease is not None:
            outcome = await self._write(self._lease, renewing=True)
            if outcome is Outcome.OURS:
                return outcome
            self._lease = None  # read it again
        result = await self.client.get_lease(self.namespace, self.name)
        if result.status == 404:
            return await self._create()
        if not result.ok:
            self._warn("read", result)
            return Outcome.ERROR
        lease = result.body
        self._observe(LeaseRecord.of(lease, self.settings.lease_duration_seconds))
        record = self._observed
        assert record is not None
        if record.holder and record.holder != self.identity and not self._expired():
            return Outcome.HELD
        return await self._write(lease, renewing=record.holder == self.identity)

    def _observe(self, record: LeaseRecord) -> None:
        """Note the record read; a new version restarts the clock of its validity."""
        if self._observed is None or record.resource_version != self._observed.resource_version:
            self._observed, self._observed_at = record, self._clock()
        if record.holder != self.holder:
            self.holder = record.holder
            if record.holder != self.identity:
                self.log.info("leader.observed", identity=self.identity, holder=record.holder or None)

    def _expired(self) -> bool:
        assert self._observed is not None
        return self._clock() >= self._observed_at + self._observed.duration

    def _spec(self, previous: LeaseRecord | None, renewing: bool, now: str) -> dict[str, Any]:
        transitions = previous.transitions if previous is not None else 0
        acquired = previous.acquire_time if renewing and previous is not None else now
        if previous is not None and not renewing:  # client-go counts every change of holder
            transitions += 1
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": math.ceil(self.settings.lease_duration_seconds),
            "acquireTime": acquired or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    async def _create(self) -> Outcome:
        sent = self._clock()
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": self._spec(None, False, micro_time(self._wall())),
        }
        result = await self.client.create_lease(self.namespace, lease)
        if result.status == 409:  # another candidate created it first
            return Outcome.CONFLICT
        if not result.ok:
            self._warn("create", result)
            return Outcome.ERROR
        return self._won(result.body, sent)

    async def _write(self, lease: dict[str, Any], *, renewing: bool) -> Outcome:
        sent = self._clock()
        previous = LeaseRecord.of(lease, self.settings.lease_duration_seconds)
        body = {**lease, "spec": {**(lease.get("spec") or {}),
                                  **self._spec(previous, renewing, micro_time(self._wall()))}}
        result = await self.client.replace_lease(self.namespace, self.name, body)
        if result.status == 409:
            return Outcome.CONFLICT
        if not result.ok:
            self._warn("renew" if renewing else "acquire", result)
            return Outcome.ERROR
        return self._won(result.body, sent)

    def _won(self, lease: dict[str, Any], sent: float) -> Outcome:
        """Our write landed: the Lease is ours from when the write was sent (the others count from later)."""
        self._lease = lease
        self._renewed_at = sent
        self._observe(LeaseRecord.of(lease, self.settings.lease_duration_seconds))
        return Outcome.OURS

    def _warn(self, what: str, result: ApiResult) -> None:
        self.log.warning("leader.lease_failed", identity=self.identity, call=what, code=result.status,
                         error=result.message)

    def _set_role(self, role: Role) -> None:
        self.role = role
        if role is Role.LEADER:
            self.leading.set()
        else:
            self.leading.clear()
        if role is Role.LOST:
            self.lost.set()
        if self.on_change is not None:
            self.on_change(role)

    # ------------------------------------------------------------------ shutdown
    async def release(self, timeout: float = 5.0) -> bool:
        """Give the Lease up if we lead (the campaign task already stopped): holder cleared, duration 1 s,
        so that a standby takes over at its next try. Whether the Lease was released.

        A renewal cancelled in flight may have landed after all, leaving us a version behind: a 409 is
        followed by a read, and the release is written again while the Lease still names us."""
        if self.role is not Role.LEADER or self._lease is None:
            return False
        self._set_role(Role.RELEASED)
        lease: dict[str, Any] | None = self._lease
        result = ApiResult(0, {"message": f"no answer within {timeout:g} s"})
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                for _ in range(3):
                    assert lease is not None
                    now = micro_time(self._wall())
                    spec = {**(lease.get("spec") or {}), "holderIdentity": "", "leaseDurationSeconds": 1,
                            "acquireTime": now, "renewTime": now}
                    released = {**lease, "spec": spec}
                    result = await self.client.replace_lease(self.namespace, self.name, released)
                    if result.status != 409:
                        break
                    current = await self.client.get_lease(self.namespace, self.name)
                    if not current.ok or LeaseRecord.of(current.body, 0).holder != self.identity:
                        break  # someone else holds it already
                    lease = current.body
        if not result.ok:  # it runs out by itself
            self._warn("release", result)
            return False
        self.log.info("leader.released", identity=self.identity, lease=f"{self.namespace}/{self.name}")
        return True
