"""Mutating admission dispatch: the API server's webhook plugin, as a ``MutatingAdmission``.

``AdmissionDispatcher`` is handed to the API server, which awaits it on every pod CREATE.  It keeps
the stored MutatingWebhookConfigurations and Namespaces cached through the API server's own HTTP
API (list + watch with :class:`hami_kube.reflector.Reflector`, like the real plugin's informers),
picks the webhooks whose rules and selectors match, and calls them in order over HTTP(S):
AdmissionReview v1 (or v1beta1), ``?timeout=Ns``, ``caBundle`` verification, ``failurePolicy``,
JSON Patch application and ``IfNeeded`` reinvocation.

There is no cluster networking, so a ``clientConfig.service`` reference is resolved through the
``service_urls`` mapping ``{(namespace, name): "https://127.0.0.1:PORT"}``; the service's ``path``
is appended and the TLS server name checked is ``<name>.<namespace>.svc``, as in a cluster.
Plain ``http://`` is accepted for ``clientConfig.url`` (tests only; a real API server refuses it).

The API server's own behaviours that are approximated: a pod in a namespace that does not exist is
matched against the labels that namespace would have (``kubernetes.io/metadata.name``), and
``matchConditions`` (CEL) are not evaluated: such webhooks are called as if every condition held.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import ssl
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import structlog

from hami_kube.errors import KubeError
from hami_kube.objects import ObjectView
from hami_kube.reflector import EventHandlers, Reflector
from hami_kube.resources import MUTATING_WEBHOOK_CONFIGURATIONS, NAMESPACES, JsonObject
from hami_kube.rest import KubeClient
from hami_kubesim.access import connect, reflector_config
from hami_kubesim.admission.match import MutatingWebhook, RequestAttributes, webhooks_in_order
from hami_kubesim.admission.review import (
    CallingError,
    PatchApplyError,
    ReviewResult,
    apply_json_patch,
    build_review,
    choose_review_version,
    default_user_info,
    dry_run_unsupported,
    internal_error_message,
    kind_for,
    rejection_from_status,
    verify_response,
)
from hami_kubesim.apiserver.hooks import AdmissionDenied
from hami_kubesim.background_tasks import BackgroundRunner
from hami_kubesim.certs import client_ssl_context

__all__ = ["AdmissionDispatcher"]

log = structlog.get_logger(__name__)

_COMPONENT = "kubesim-admission"
_NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
_NO_DRY_RUN_SIDE_EFFECTS = frozenset({"None", "NoneOnDryRun"})
_OK_STATUSES = range(200, 207)  # what the API server's REST client accepts as success


@dataclass(frozen=True, slots=True)
class _Request:
    """What stays the same across the webhook calls of one admission."""

    attrs: RequestAttributes
    old_obj: dict[str, Any] | None
    namespace: str | None
    dry_run: bool


class AdmissionDispatcher:
    """Calls the stored mutating webhooks for each admitted object.

    Use ``async with dispatcher.connected(api_url):`` (or run :meth:`run` as a task) once the API
    server listens; until the caches are synced, calls wait up to ``sync_timeout`` seconds and
    are then refused with 403, as the real plugin does before it is ready.
    """

    def __init__(
        self,
        *,
        service_urls: Mapping[tuple[str, str], str] | None = None,
        user_info: Mapping[str, Any] | None = None,
        sync_timeout: float = 10.0,
    ) -> None:
        self.service_urls: dict[tuple[str, str], str] = dict(service_urls or {})
        self.user_info = dict(user_info or default_user_info())
        self.webhooks: list[MutatingWebhook] = []
        self.calls = 0
        self._sync_timeout = sync_timeout
        self._runner = BackgroundRunner(_COMPONENT, what="admission caches")
        self._client: KubeClient | None = None
        self._namespaces: Reflector | None = None
        self._configurations: Reflector | None = None
        self._http: aiohttp.ClientSession | None = None
        self._ssl_contexts: dict[bytes, ssl.SSLContext] = {}

    # -- lifecycle -------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def connected(
        self, api_url: str, *, ready_timeout: float = 30.0
    ) -> AsyncIterator[AdmissionDispatcher]:
        """Follow the API server at ``api_url`` for the duration of the block.

        The block starts once the caches are synced; ``TimeoutError`` if that takes longer than
        ``ready_timeout`` seconds.
        """
        self._runner.ready_within = ready_timeout
        await self._runner.start(self.run(api_url))
        try:
            yield self
        finally:
            await self._runner.stop()

    async def run(self, api_url: str) -> None:
        """Keep the caches current until cancelled."""
        async with (
            connect(api_url, component=_COMPONENT) as client,
            aiohttp.ClientSession() as http,
        ):
            changed = EventHandlers(
                on_add=self._on_config, on_update=self._on_config, on_delete=self._on_config
            )
            configurations = Reflector(
                client,
                MUTATING_WEBHOOK_CONFIGURATIONS,
                config=reflector_config(),
                handlers=[changed],
                name=f"{_COMPONENT}-webhooks",
            )
            namespaces = Reflector(
                client, NAMESPACES, config=reflector_config(), name=f"{_COMPONENT}-namespaces"
            )
            self._client, self._http = client, http
            self._namespaces, self._configurations = namespaces, configurations
            self.webhooks = []
            try:
                async with asyncio.TaskGroup() as group:
                    group.create_task(configurations.run(), name=f"{_COMPONENT}-webhooks")
                    group.create_task(namespaces.run(), name=f"{_COMPONENT}-namespaces")
                    await configurations.wait_synced()
                    await namespaces.wait_synced()
                    self._runner.ready.set()
            finally:
                self._runner.ready.clear()
                self._client = self._http = None
                self._namespaces = self._configurations = None

    # -- the MutatingAdmission seam --------------------------------------------------------

    async def __call__(
        self,
        operation: str,
        resource: str,
        obj: dict[str, Any],
        namespace: str | None,
        /,
        *,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        return await self.admit(
            operation=operation, resource=resource, obj=obj, namespace=namespace, dry_run=dry_run
        )

    async def admit(
        self,
        *,
        operation: str,
        resource: str,
        obj: dict[str, Any],
        namespace: str | None,
        old_obj: dict[str, Any] | None = None,
        subresource: str = "",
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Run every matching webhook over ``obj``; return the mutated object.

        Raises :class:`AdmissionDenied` with the API server's code and message when a webhook
        rejects the request or fails under ``failurePolicy: Fail``.
        """
        await self._wait_ready()
        kind = kind_for(resource, obj)
        attrs = RequestAttributes(
            operation=operation,
            group=kind.group,
            version=kind.version,
            resource=resource,
            subresource=subresource,
            namespaced=bool(namespace),
        )
        added_type_meta = "apiVersion" not in obj and "kind" not in obj
        current = copy.deepcopy(obj)
        if added_type_meta and kind.kind:
            # Webhooks receive the full object with its type, as the API server encodes it.
            current["apiVersion"] = f"{kind.group}/{kind.version}" if kind.group else kind.version
            current["kind"] = kind.kind
        request = _Request(attrs=attrs, old_obj=old_obj, namespace=namespace, dry_run=dry_run)
        hooks = [hook for hook in self.webhooks if hook.matches_rules(attrs)]
        invoked_reinvocable: list[str] = []
        reinvoke: set[str] = set()
        for hook in hooks:
            if not await self._selectors_match(hook, current, old_obj, namespace):
                continue
            current, changed = await self._call(hook, request, current)
            if changed:
                reinvoke.update(invoked_reinvocable)
            if hook.reinvocation_policy == "IfNeeded":
                invoked_reinvocable.append(hook.uid)
        for hook in hooks:
            if hook.uid in reinvoke and await self._selectors_match(
                hook, current, old_obj, namespace
            ):
                current, _ = await self._call(hook, request, current)
        if added_type_meta:
            current.pop("apiVersion", None)
            current.pop("kind", None)
        return current

    # -- internals -------------------------------------------------------------------------

    def _on_config(self, *_changed: JsonObject) -> None:
        # The reflector updates its store before it reports, so the store is the current set.
        stored = self._configurations.store.objects() if self._configurations else ()
        webhooks, errors = webhooks_in_order(stored)
        for error in errors:
            log.error(
                "ignoring malformed mutating webhook",
                field=error.key,
                value=error.value,
                reason=error.reason,
            )
        self.webhooks = webhooks

    async def _wait_ready(self) -> None:
        try:
            async with asyncio.timeout(self._sync_timeout):
                await self._runner.ready.wait()
        except TimeoutError:
            log.error("admission called before its caches synced")
            raise AdmissionDenied(403, "not yet ready to handle request", "Forbidden") from None

    async def _selectors_match(
        self,
        hook: MutatingWebhook,
        obj: dict[str, Any],
        old_obj: dict[str, Any] | None,
        namespace: str | None,
    ) -> bool:
        if not hook.matches_object(obj, old_obj):
            return False
        if namespace:
            labels = await self._namespace_labels(namespace)
            if not hook.namespace_selector.matches(labels):
                return False
        if hook.match_conditions:
            log.warning(
                "matchConditions are not evaluated; calling the webhook",
                webhook=hook.name,
                conditions=list(hook.match_conditions),
            )
        return True

    async def _namespace_labels(self, namespace: str) -> dict[str, str]:
        cached = self._namespaces.store.get(namespace) if self._namespaces else None
        if cached is None and self._client is not None:
            with contextlib.suppress(KubeError):
                cached = await self._client.get(NAMESPACES, namespace)
        labels = dict(ObjectView(cached or {}).labels)
        labels.setdefault(_NAMESPACE_NAME_LABEL, namespace)
        return labels

    async def _call(
        self, hook: MutatingWebhook, request: _Request, obj: dict[str, Any]
    ) -> tuple[dict[str, Any], bool]:
        if request.dry_run and hook.side_effects not in _NO_DRY_RUN_SIDE_EFFECTS:
            rejection = dry_run_unsupported(hook.name)
            raise AdmissionDenied(rejection.code, rejection.message, rejection.reason)
        self.calls += 1
        try:
            result = await self._exchange(hook, request, obj)
        except CallingError as exc:
            message = f'failed calling webhook "{hook.name}": {exc}'
            if hook.failure_policy == "Ignore":
                log.warning(
                    "failed calling webhook, failing open", webhook=hook.name, error=message
                )
                return obj, False
            log.warning("failed calling webhook, failing closed", webhook=hook.name, error=message)
            raise AdmissionDenied(500, internal_error_message(message), "InternalError") from exc
        for warning in result.warnings:
            log.info("webhook warning", webhook=hook.name, warning=warning)
        if not result.allowed:
            rejection = rejection_from_status(hook.name, result.status)
            log.info("webhook denied the request", webhook=hook.name, message=rejection.message)
            raise AdmissionDenied(rejection.code, rejection.message, rejection.reason)
        if not result.patch:
            return obj, False
        try:
            patched = apply_json_patch(obj, result.patch)
        except PatchApplyError as exc:
            log.error(
                "webhook patch does not apply",
                webhook=hook.name,
                error=str(exc),
                patch=list(result.patch),
            )
            raise AdmissionDenied(500, internal_error_message(str(exc)), "InternalError") from exc
        return patched, patched != obj

    async def _exchange(
        self, hook: MutatingWebhook, request: _Request, obj: dict[str, Any]
    ) -> ReviewResult:
        attrs = request.attrs
        version = choose_review_version(hook.review_versions)
        url, server_hostname = self._resolve(hook)
        uid = str(uuid.uuid4())
        review = build_review(
            version=version,
            uid=uid,
            attrs=attrs,
            kind=kind_for(attrs.resource, obj),
            obj=None if attrs.operation == "DELETE" else obj,
            old_obj=request.old_obj,
            namespace=request.namespace,
            user_info=self.user_info,
            dry_run=request.dry_run,
        )
        body = await self._post(hook, url, server_hostname, review)
        return verify_response(body, uid=uid, version=version)

    def _resolve(self, hook: MutatingWebhook) -> tuple[str, str | None]:
        config = hook.client_config
        if config.url is not None:
            return config.url, None
        service = config.service
        assert service is not None
        base = self.service_urls.get((service.namespace, service.name))
        if base is None:
            raise CallingError(
                f'failed to call webhook: service "{service.namespace}/{service.name}" has no '
                "address (add it to the dispatcher's service_urls)"
            )
        return base.rstrip("/") + service.path, f"{service.name}.{service.namespace}.svc"

    async def _post(
        self, hook: MutatingWebhook, url: str, server_hostname: str | None, review: dict[str, Any]
    ) -> object:
        if self._http is None:
            raise CallingError("failed to call webhook: the dispatcher is not running")
        timeout = hook.timeout_seconds
        shown = f'Post "{url}?timeout={timeout}s"'
        try:
            ssl_arg = self._ssl_for(hook) if url.startswith("https://") else True
            async with self._http.post(
                url,
                params={"timeout": f"{timeout}s"},
                data=json.dumps(review).encode(),
                headers={"Content-Type": "application/json", "Accept": "application/json"},
                ssl=ssl_arg,
                server_hostname=server_hostname,
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as response:
                text = await response.text()
                if response.status not in _OK_STATUSES:
                    raise CallingError(
                        f"failed to call webhook: {shown}: the server responded with status "
                        f"{response.status}: {text[:200]!r}"
                    )
        except TimeoutError as exc:
            raise CallingError(
                f"failed to call webhook: {shown}: context deadline exceeded"
            ) from exc
        except (aiohttp.ClientError, ssl.SSLError, OSError) as exc:
            raise CallingError(f"failed to call webhook: {shown}: {exc}") from exc
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise CallingError(
                f"failed to call webhook: {shown}: response is not JSON: {exc} ({text[:200]!r})"
            ) from exc

    def _ssl_for(self, hook: MutatingWebhook) -> ssl.SSLContext | bool:
        bundle = hook.client_config.ca_bundle
        if bundle is None:
            return True  # the system roots, as the API server does without caBundle
        context = self._ssl_contexts.get(bundle)
        if context is None:
            try:
                context = client_ssl_context(bundle)
            except (ssl.SSLError, ValueError) as exc:
                raise CallingError(
                    f"could not get REST client: invalid caBundle: {exc} (value {bundle[:80]!r})"
                ) from exc
            self._ssl_contexts[bundle] = context
        return context
