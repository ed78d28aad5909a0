"""A stand-in for kube-controller-manager's resourceclaim controller (its decisions are in
:mod:`.claims`).

It follows pods, ResourceClaims and ResourceClaimTemplates through the API server
(``hami_kube`` reflectors):

* a pod that is neither done nor being deleted gets a claim for each template entry of its
  ``spec.resourceClaims`` that has none yet (``POST`` with ``generateName``; an orphan made for
  it earlier is adopted), then the names in ``status.resourceClaimStatuses`` (a strategic merge
  patch of ``pods/<name>/status``; the real controller uses server-side apply);
* a claim is synced when it changes and when a pod using or owning it changes or goes:
  ``status.reservedFor`` loses gone or done pods (``PUT .../status``, which also clears the
  allocation when the last one goes and the scheduler's finalizer is on the claim), the
  finalizer is removed once no allocation is left, and a generated claim whose pod is done,
  replaced or deleted is deleted.

kubesim has no garbage collector: deleting the claims of a deleted pod (the ownerReference's
cascade) is done here, by the same rule.  Failures retry with backoff; a pod whose template
does not exist yet is synced again when the template appears.
"""

from __future__ import annotations

import asyncio

import structlog

from hami_kube.errors import KubeError, NotFoundError
from hami_kube.objects import object_key
from hami_kube.reflector import EventHandlers, Reflector
from hami_kube.resources import PODS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS, JsonObject
from hami_kube.rest import KubeClient, PatchType
from hami_kube.store import Store
from hami_kubesim.access import connect, reflector_config
from hami_kubesim.background_tasks import BackgroundRunner, RunsInBackground
from hami_kubesim.controllers.claims import (
    FINALIZER,
    claim_from_template,
    claim_status_names,
    find_generated,
    is_pod_done,
    owning_pod,
    pods_to_look_up,
    referenced_claims,
    sync_claim,
    template_claims,
)
from hami_kubesim.controllers.workqueue import WorkQueue

__all__ = ["ResourceClaimController"]

log = structlog.get_logger(__name__)

Item = tuple[str, str]  # ("pod" | "claim", namespace/name)


def _namespace(key: str) -> str:
    return key.partition("/")[0]


class ResourceClaimController(RunsInBackground):
    """Run with ``async with ResourceClaimController(api_url) as controller:`` (returns once
    its caches are synced) or ``await controller.run()``; cancellation stops it."""

    def __init__(self, api_url: str, *, instance: str = "kube-controller-manager") -> None:
        self.api_url = api_url
        self._instance = instance
        self._pods: Store | None = None
        self._claims: Store | None = None
        self._templates: Store | None = None
        self._queue: WorkQueue[Item] = WorkQueue("resourceclaim controller")
        self._created: dict[tuple[str, str], str] = {}  # (pod uid, pod claim) -> claim name
        self.syncs = 0
        """Pod and claim syncs done (for tests and logs)."""
        super().__init__(
            BackgroundRunner("resourceclaim-controller", what="resourceclaim controller")
        )

    async def run(self) -> None:
        async with connect(self.api_url, component=self._instance) as client:
            pods = Reflector(
                client,
                PODS,
                config=reflector_config(),
                handlers=[
                    EventHandlers(
                        on_add=self._pod_changed,
                        on_update=lambda _old, new: self._pod_changed(new),
                        on_delete=self._pod_changed,
                    )
                ],
                name="resourceclaim-controller-pods",
            )
            claims = Reflector(
                client,
                RESOURCE_CLAIMS,
                config=reflector_config(),
                handlers=[
                    EventHandlers(
                        on_add=self._claim_changed,
                        on_update=lambda _old, new: self._claim_changed(new),
                    )
                ],
                name="resourceclaim-controller-claims",
            )
            templates = Reflector(
                client,
                RESOURCE_CLAIM_TEMPLATES,
                config=reflector_config(),
                handlers=[EventHandlers(on_add=self._template_added)],
                name="resourceclaim-controller-templates",
            )
            self._pods, self._claims, self._templates = pods.store, claims.store, templates.store
            reflectors = (pods, claims, templates)
            try:
                async with asyncio.TaskGroup() as group:
                    for reflector in reflectors:
                        group.create_task(reflector.run(), name=reflector.name)
                    for reflector in reflectors:
                        await reflector.wait_synced()
                    self._enqueue_orphans()
                    self.runner.ready.set()
                    await self._queue.run(lambda item: self._sync(client, item))
            finally:
                self.runner.ready.clear()
                self._queue.close()
                self._pods = self._claims = self._templates = None

    # -- the queue -------------------------------------------------------------------------

    def _enqueue(self, item: Item) -> None:
        self._queue.add(item)

    def _pod_changed(self, pod: JsonObject) -> None:
        key = object_key(pod)
        self._enqueue(("pod", key))
        namespace = _namespace(key)
        for name in referenced_claims(pod):
            self._enqueue(("claim", f"{namespace}/{name}"))
        uid = pod["metadata"].get("uid")
        for claim in self._claims.objects() if self._claims is not None else ():
            reserved = (claim.get("status") or {}).get("reservedFor") or ()
            owner = owning_pod(claim)
            if (owner is not None and owner[1] == uid) or any(
                r.get("uid") == uid for r in reserved
            ):
                self._enqueue(("claim", object_key(claim)))

    def _claim_changed(self, claim: JsonObject) -> None:
        self._enqueue(("claim", object_key(claim)))

    def _template_added(self, template: JsonObject) -> None:
        namespace = template["metadata"].get("namespace")
        for pod in self._pods.objects() if self._pods is not None else ():
            if pod["metadata"].get("namespace") == namespace and template_claims(pod):
                self._enqueue(("pod", object_key(pod)))

    def _enqueue_orphans(self) -> None:
        """At start every claim gets a sync: pods may have gone while nobody watched."""
        for claim in self._claims.objects() if self._claims is not None else ():
            self._enqueue(("claim", object_key(claim)))

    # -- the syncs -------------------------------------------------------------------------

    async def _sync(self, client: KubeClient, item: Item) -> None:
        kind, key = item
        await (self._sync_pod if kind == "pod" else self._sync_claim)(client, key)

    async def _sync_pod(self, client: KubeClient, key: str) -> None:
        pods, claims, templates = self._pods, self._claims, self._templates
        pod = None if pods is None else pods.get(key)
        if pod is None or claims is None or templates is None:
            return
        if pod["metadata"].get("deletionTimestamp") or is_pod_done(pod):
            return
        self.syncs += 1
        namespace, uid = pod["metadata"]["namespace"], pod["metadata"]["uid"]
        known = claim_status_names(pod)
        new: dict[str, str] = {}
        for pod_claim, template_name in template_claims(pod):
            if pod_claim in known:
                continue
            name = self._created.get((uid, pod_claim))
            if name is None:
                found = find_generated(pod, pod_claim, claims.objects())
                name = found["metadata"]["name"] if found is not None else None
            if name is None:
                template = templates.get(f"{namespace}/{template_name}")
                if template is None:
                    raise KubeError(f"resource claim template {template_name!r} not found")
                created = await client.create(
                    RESOURCE_CLAIMS, claim_from_template(pod, pod_claim, template)
                )
                name = created["metadata"]["name"]
                self._created[uid, pod_claim] = name
            new[pod_claim] = name
        if not new:
            return
        entries = [{"name": k, "resourceClaimName": v} for k, v in new.items()]
        try:
            await client.patch(
                PODS,
                pod["metadata"]["name"],
                {"status": {"resourceClaimStatuses": entries}},
                namespace=namespace,
                patch_type=PatchType.STRATEGIC,
                subresource="status",
            )
        except NotFoundError:
            return
        for pod_claim in new:
            self._created.pop((uid, pod_claim), None)

    async def _sync_claim(self, client: KubeClient, key: str) -> None:
        claim = None if self._claims is None else self._claims.get(key)
        if claim is None or self._pods is None:
            return
        self.syncs += 1
        namespace = _namespace(key)
        pods: dict[str, JsonObject] = {}
        for name in pods_to_look_up(claim):
            pod = self._pods.get(f"{namespace}/{name}")
            if pod is None:  # not seen yet, or gone: ask, as the real controller does
                try:
                    pod = await client.get(PODS, name, namespace=namespace)
                except NotFoundError:
                    continue
            pods[name] = pod
        decision = sync_claim(claim, pods)
        name = claim["metadata"]["name"]
        try:
            if decision.status is not None:
                claim = await client.replace(
                    RESOURCE_CLAIMS, {**claim, "status": decision.status}, subresource="status"
                )
            if decision.remove_finalizer:
                finalizers = [
                    f for f in claim["metadata"].get("finalizers") or () if f != FINALIZER
                ]
                claim = await client.replace(
                    RESOURCE_CLAIMS,
                    {**claim, "metadata": {**claim["metadata"], "finalizers": finalizers}},
                )
            if decision.delete and not claim["metadata"].get("deletionTimestamp"):
                await client.delete(
                    RESOURCE_CLAIMS, name, namespace=namespace, uid=claim["metadata"]["uid"]
                )
                log.info("deleted unused generated claim", claim=key)
        except NotFoundError:
            return
