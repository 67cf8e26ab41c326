"""DynamicResources' PreBind: a pod's claims allocated and reserved in the API before its binding.

As kube-scheduler's bindClaim: for each claim not yet reserved for the pod,
- a claim we allocated gets kube's finalizer (`resource.kubernetes.io/delete-protection`, an
  Update of the claim) and then `status.allocation` and the pod in `status.reservedFor` (an
  Update of the status subresource, with the resourceVersion read: a claim that changed under us
  is read again and, unless allocated elsewhere or being deleted meanwhile, written again);
- a claim allocated already gets only the reservation;
- DRA-backed extended resources: the claim is created (`<pod>-extended-resources-` with the
  pod as controlling owner and `resource.kubernetes.io/extended-resource-claim: "true"`), then
  allocated and reserved as above, and the pod's `status.extendedResourceClaimStatus` names it
  with the container → request mappings.
Each answer replaces the assumed claim in the cache (as kube's assume cache takes its writes).
Any failure stops the binding: the binder releases the assumptions, and the reservations this
PreBind already wrote are removed again (kube's Unreserve: a strategic-merge patch that deletes
the pod's entry from reservedFor; an allocation written stays, as in kube, for the resource-claim
controller to clear once nobody reserves the claim), and the extended-resource claim it created
is deleted. A pod with claims is never bound without them.

The calls go through KubeClient.request (paths of resource.k8s.io/v1); RBAC needs, on
resourceclaims: get, create, update, delete; on resourceclaims/status: update, patch; on
pods/status: patch.
"""

from __future__ import annotations

from typing import Any

from ai_scheduler.api.kube import ApiResult, KubeClient
from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.dra import EXTENDED_CLAIM_ANNOTATION, Claim
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.log import JsonLogger
from ai_scheduler.scheduler.framework.plugins.dynamic_resources import DraPlan, DynamicResources, _allocation

FINALIZER = "resource.kubernetes.io/delete-protection"
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
CONFLICT_RETRIES = 5


def claims_path(namespace: str, name: str = "") -> str:
    path = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
    return f"{path}/{name}" if name else path


def _reference(pod: PodRecord) -> dict[str, str]:
    return {"resource": "pods", "name": pod.name, "uid": pod.uid}


class DraPreBind:
    def __init__(self, client: KubeClient, cache: SchedulerCache, logger: JsonLogger) -> None:
        self.client = client
        self.cache = cache
        self.log = logger

    async def bind(self, pod: PodRecord, node: str, plan: DraPlan) -> str:
        """Write the plan's claims; '' when all are allocated and reserved for the pod, else why not (what
        was written is undone first)."""
        reserved: list[tuple[str, str, str]] = []  # (namespace, name, uid) reserved by us here
        created: tuple[str, str] | None = None
        error = ""
        try:
            for write in plan.writes:
                error = await self._write(pod, write.claim, write.allocate)
                if error:
                    break
                reserved.append((write.claim.namespace, write.claim.name, write.claim.uid))
            if not error and plan.extended is not None:
                error, created = await self._extended(pod, plan)
                plan.created = created
        finally:
            DynamicResources.release(plan, self.cache)
        if error:
            for namespace, name, uid in reserved:
                await self._unreserve(pod, namespace, name, uid)
            if created is not None:
                await self._delete(*created)
                plan.created = None
            return f"binding claims: {error}"
        self.log.info("prebind.claims", pod=pod.key, node=node,
                      claims=[f"{w.claim.namespace}/{w.claim.name}" for w in plan.writes],
                      extended=bool(plan.extended))
        return ""

    async def unreserve(self, pod: PodRecord, plan: DraPlan) -> None:
        """kube's Unreserve after a binding that failed once PreBind had succeeded: the pod's reservations
        taken back, the extended-resource claim made for it deleted."""
        for write in plan.writes:
            await self._unreserve(pod, write.claim.namespace, write.claim.name, write.claim.uid)
        if plan.created is not None:
            await self._delete(*plan.created)
            plan.created = None

    async def _delete(self, namespace: str, name: str) -> None:
        """kube's deleteClaim: our finalizer taken off (else the claim would linger, Terminating), then
        the claim deleted."""
        path = claims_path(namespace, name)
        for _ in range(CONFLICT_RETRIES):
            got = await self.client.request("GET", path)
            if got.status == 404:
                return
            if not got.ok:
                break
            meta = got.body.get("metadata") or {}
            finalizers = meta.get("finalizers") or []
            if FINALIZER not in finalizers:
                break
            body = {**got.body, "metadata": {**meta, "finalizers": [f for f in finalizers if f != FINALIZER]}}
            result = await self.client.request("PUT", path, body=body)
            if result.status != 409:
                break
        result = await self.client.request("DELETE", path)
        if not result.ok and result.status != 404:
            self.log.warning("claim.delete_failed", claim=f"{namespace}/{name}", error=result.message)

    async def _write(self, pod: PodRecord, claim: Claim, allocate: bool) -> str:
        # The newest claim we know (the informer's: another pod's PreBind may have written it since our
        # Reserve), read again from the API after a conflict.
        informer = self.cache.dra.claims.get(claim.key)
        latest = informer if informer is not None and informer.uid == claim.uid else claim
        obj: dict[str, Any] = dict(latest.raw)
        for attempt in range(CONFLICT_RETRIES):
            if attempt:
                got = await self.client.request("GET", claims_path(claim.namespace, claim.name))
                if not got.ok:
                    return f"get updated claim {claim.namespace}/{claim.name} after conflict: {got.message}"
                obj = got.body
            meta = obj.get("metadata") or {}
            status = dict(obj.get("status") or {})
            if meta.get("deletionTimestamp"):
                return f"claim {claim.namespace}/{claim.name} got deleted in the meantime"
            if allocate:
                if status.get("allocation") is not None:
                    return f"claim {claim.namespace}/{claim.name} got allocated elsewhere in the meantime"
                if FINALIZER not in (meta.get("finalizers") or []):
                    finalizers = [*(meta.get("finalizers") or []), FINALIZER]
                    body = {**obj, "metadata": {**meta, "finalizers": finalizers}}
                    path = claims_path(claim.namespace, claim.name)
                    result = await self.client.request("PUT", path, body=body)
                    if result.status == 409:
                        continue
                    if not result.ok:
                        return f"add finalizer to claim {claim.namespace}/{claim.name}: {result.message}"
                    obj = result.body
                    status = dict(obj.get("status") or {})
                assert claim.allocation is not None
                status["allocation"] = dict(claim.allocation.raw)
            elif status.get("allocation") is None:
                return f"claim {claim.namespace}/{claim.name} got deallocated elsewhere in the meantime"
            status["reservedFor"] = [*(status.get("reservedFor") or []), _reference(pod)]
            body = {**obj, "status": status}
            result = await self.client.request(
                "PUT", claims_path(claim.namespace, claim.name) + "/status", body=body
            )
            if result.status == 409:
                continue
            if not result.ok:
                verb = "add allocation and reservation to" if allocate else "add reservation to"
                return f"{verb} claim {claim.namespace}/{claim.name}: {result.message}"
            self.cache.dra.set_claim(Claim.from_api(result.body))
            return ""
        return f"claim {claim.namespace}/{claim.name}: conflicts on every attempt"

    async def _extended(self, pod: PodRecord, plan: DraPlan) -> tuple[str, tuple[str, str] | None]:
        assert plan.extended is not None
        spec, result, mappings = plan.extended
        requests = [
            {"name": g.name,
             "exactly": {"deviceClassName": r.class_name, "allocationMode": r.mode, "count": r.count}}
            for g in spec.requests
            for r in g.alternatives
        ]
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "generateName": f"{pod.name}-extended-resources-",
                "namespace": pod.namespace,
                "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid, "controller": True}
                ],
            },
            "spec": {"devices": {"requests": requests}},
        }
        made = await self.client.request("POST", claims_path(pod.namespace), body=body)
        if not made.ok:
            return f"create claim for extended resources {pod.namespace}/{pod.name}: {made.message}", None
        claim = Claim.from_api(made.body)
        created = (claim.namespace, claim.name)
        claim.allocation = _allocation(result)
        error = await self._write(pod, claim, True)
        if error:
            return error, created
        patch = {"status": {"extendedResourceClaimStatus": {
            "requestMappings": mappings, "resourceClaimName": claim.name,
        }}}
        answer: ApiResult = await self.client.patch_pod_status(pod.namespace, pod.name, patch)
        if not answer.ok:
            await self._unreserve(pod, claim.namespace, claim.name, claim.uid)
            message = f"update pod {pod.namespace}/{pod.name} ExtendedResourceClaimStatus: {answer.message}"
            return message, created
        return "", created

    async def _unreserve(self, pod: PodRecord, namespace: str, name: str, uid: str) -> None:
        """kube's Unreserve: the pod's entry deleted from reservedFor (a strategic-merge patch)."""
        patch = {"metadata": {"uid": uid}, "status": {"reservedFor": [{"$patch": "delete", "uid": pod.uid}]}}
        result = await self.client.request(
            "PATCH", claims_path(namespace, name) + "/status", body=patch, content_type=STRATEGIC_MERGE
        )
        if not result.ok:
            self.log.warning(
                "unreserve.failed", pod=pod.key, claim=f"{namespace}/{name}", error=result.message
            )
        else:
            self.cache.dra.set_claim(Claim.from_api(result.body))
