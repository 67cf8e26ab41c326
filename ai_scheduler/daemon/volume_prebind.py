"""VolumeBinding's PreBind: bind or provision a pod's claims for the chosen node, then wait for them.

As kube-scheduler's volumebinding PreBind (AssumePodVolumes, BindPodVolumes,
checkBindings):
- a claim matched to an available PV: the PV's `spec.claimRef` is set to the
  claim (with `pv.kubernetes.io/bound-by-controller: "yes"` when it was not
  pre-bound to it); the PV controller then binds the claim;
- a claim to provision: the chosen node is written into its
  `volume.kubernetes.io/selected-node` annotation; the provisioner creates a
  volume there, and the PV controller binds it;
- then the pod waits, polling once a second as kube does, until every claim is
  fully bound (`spec.volumeName` and `pv.kubernetes.io/bind-completed`) to a
  PV whose node affinity admits the node, for at most kube's default
  bindTimeoutSeconds (600). A provisioner that gives up removes the
  annotation (`provisioning failed for PVC "x"`); a PV whose claimRef was
  cleared, a claim or pod that went away, or the timeout end the wait with an
  error: the binder forgets the assumption and the pod is retried.

The plan is made and *assumed* in the cycle that chose the node (`assume`,
kube's AssumePodVolumes in Reserve): the PVs are held in the cache as bound
to their claims and the claims to provision as having the node chosen, so that
the next cycle, which runs before any write is answered, neither gives the
same PV to another claim nor provisions a claim elsewhere. The writes are JSON
merge patches that carry the resourceVersion the decision was made on (kube
sends Updates: the same optimistic concurrency); their answers replace the
assumed objects, as kube's assume cache holds its writes. A binding that fails
before its writes landed puts the informer's objects back (`revert`, kube's
RevertAssumedPodVolumes); written ones stay, as in kube, and the PV controller
finishes them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.cache.volumes import (
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
    Claim,
    Volume,
)
from ai_scheduler.log import JsonLogger
from ai_scheduler.scheduler.framework.plugins.volume_binding import NodeVolumes, affinity_allows, prebind_plan

BIND_TIMEOUT_SECONDS = 600.0  # kube's VolumeBindingArgs.bindTimeoutSeconds default
POLL_SECONDS = 1.0  # kube's checkBindings period
DEADLINE_EXCEEDED = "binding volumes: context deadline exceeded"


def claim_ref_patch(volume: Volume, claim: Claim) -> dict[str, Any]:
    """GetBindVolumeToClaim as a merge patch on the PV (with the resourceVersion it was chosen at)."""
    metadata: dict[str, Any] = {"resourceVersion": volume.resource_version}
    if not volume.bound_to(claim) and ANN_BOUND_BY_CONTROLLER not in volume.annotations:
        metadata["annotations"] = {ANN_BOUND_BY_CONTROLLER: "yes"}
    claim_ref = {
        "kind": "PersistentVolumeClaim",
        "apiVersion": "v1",
        "namespace": claim.namespace,
        "name": claim.name,
        "uid": claim.uid,
        "resourceVersion": claim.resource_version,
    }
    return {"metadata": metadata, "spec": {"claimRef": claim_ref}}


def selected_node_patch(claim: Claim, node: str) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": claim.resource_version, "annotations": {ANN_SELECTED_NODE: node}}}


def _affinity_error(volume: Volume, node: NodeRecord) -> str:
    detail = "no matching NodeSelectorTerms"
    return f'pv "{volume.name}" node affinity doesn\'t match node "{node.name}": {detail}'


class VolumePreBind:
    def __init__(
        self,
        client: KubeClient,
        cache: SchedulerCache,
        logger: JsonLogger,
        *,
        timeout: float = BIND_TIMEOUT_SECONDS,
        poll: float = POLL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.cache = cache
        self.log = logger
        self.timeout = timeout
        self.poll = poll
        self._clock = clock

    def assume(self, pod: PodRecord, node_name: str) -> NodeVolumes | str:
        """AssumePodVolumes, in the cycle that chose the node (before any later cycle looks): what PreBind
        will write, held in the cache at once (the PVs taken, the claims' node chosen); or why not."""
        node = self.cache.node_record(node_name)
        if node is None:
            return f'node "{node_name}" not found'
        plan = prebind_plan(pod, self.cache.volumes, node)
        if isinstance(plan, str):
            return plan
        index = self.cache.volumes
        for volume, claim in plan.bindings:
            index.assume_volume(volume, claim)
        for claim in plan.provisions:
            if claim.selected_node != node_name:
                index.assume_claim(claim, node_name)
        return plan

    def revert(self, plan: NodeVolumes | str | None) -> None:
        """RevertAssumedPodVolumes: the assumptions of a plan whose pod will not be bound there."""
        if isinstance(plan, NodeVolumes):
            self.cache.volumes.revert((v.name for v, _ in plan.bindings), (c.key for c in plan.provisions))

    async def bind(self, pod: PodRecord, node_name: str, plan: NodeVolumes | str) -> str:
        """Write what `assume` planned on `node_name`, wait until the claims are bound: '' then, else the
        error."""
        if isinstance(plan, str):
            return f"binding volumes: {plan}"
        if not plan.bindings and not plan.provisions:
            return ""  # every claim is bound already
        error = await self._write(plan, node_name)
        self.cache.volumes.settle((v.name for v, _ in plan.bindings), (c.key for c in plan.provisions))
        if error:
            return f"binding volumes: {error}"
        self.log.info(
            "prebind.volumes",
            pod=pod.key,
            node=node_name,
            bound=[f"{c.namespace}/{c.name}={v.name}" for v, c in plan.bindings],
            provisioning=[f"{c.namespace}/{c.name}" for c in plan.provisions],
        )
        deadline = self._clock() + self.timeout
        while True:
            outcome = self._check(pod, node_name, plan)
            if outcome is not None:
                return outcome and f"binding volumes: {outcome}"
            if self._clock() >= deadline:
                return DEADLINE_EXCEEDED
            await asyncio.sleep(self.poll)

    async def _write(self, plan: NodeVolumes, node_name: str) -> str:
        volumes = self.cache.volumes
        for volume, claim in plan.bindings:
            result = await self.client.patch_persistent_volume(volume.name, claim_ref_patch(volume, claim))
            if not result.ok:
                return result.message
            volumes.set_volume(Volume.from_api(result.body))
        for claim in plan.provisions:
            if claim.selected_node == node_name:
                continue
            patch = selected_node_patch(claim, node_name)
            result = await self.client.patch_persistent_volume_claim(claim.namespace, claim.name, patch)
            if not result.ok:
                return result.message
            volumes.set_claim(Claim.from_api(result.body))
        return ""

    def _check(self, pod: PodRecord, node_name: str, plan: NodeVolumes) -> str | None:
        """checkBindings: '' when every claim is bound, an error when it never will be, None to wait."""
        if self.cache.pod_state(pod.uid) is None:
            return "pod does not exist any more"
        node = self.cache.node_record(node_name)
        if node is None:
            return f'node "{node_name}" not found'
        index = self.cache.volumes
        for volume, claim in plan.bindings:
            current = index.volumes.get(volume.name)
            if current is None:
                return f'failed to check binding: persistentvolume "{volume.name}" not found'
            bound = index.claims.get(claim.key)
            if bound is None:
                return f'failed to check binding: persistentvolumeclaim "{claim.name}" not found'
            if current.claim_ref is None or not current.claim_ref[2]:
                return f'ClaimRef got reset for pv "{volume.name}"'
            if not bound.fully_bound:
                return None
            if not affinity_allows(current, node.labels):
                return _affinity_error(current, node)
        for claim in plan.provisions:
            current_claim = index.claims.get(claim.key)
            if current_claim is None:
                return f'failed to check provisioning pvc: persistentvolumeclaim "{claim.name}" not found'
            if current_claim.selected_node != node_name:
                return f'provisioning failed for PVC "{claim.name}"'
            if current_claim.volume_name:
                provisioned = index.volumes.get(current_claim.volume_name)
                if provisioned is None:
                    return None  # not seen yet
                if not affinity_allows(provisioned, node.labels):
                    return _affinity_error(provisioned, node)
            if not current_claim.fully_bound:
                return None
        return ""
