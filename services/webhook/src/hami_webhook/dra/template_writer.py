"""Making sure the ResourceClaimTemplates a converted pod references exist (``--dra-claims``).

Called between the decision and the reply, never on a dry run.  A template is created with one
POST; ``AlreadyExists`` is success, because the name is a hash of the spec
(:func:`hami_webhook.dra.claims.template_for`): an existing template of that name asks exactly
what this pod asks.  Templates are never updated or deleted here: the API makes their spec
immutable, they are shared by every pod of the same shape, and one left unused costs one small
object per distinct request shape in a namespace.

Templates known to exist are remembered for :data:`KNOWN_FOR_S` seconds so that a rollout of
many replicas costs one POST, not one per pod; past that the next pod POSTs again, which also
re-creates a template someone deleted (its pods would otherwise wait for their claim).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from typing import Final

from hami_kube.errors import AlreadyExistsError
from hami_kube.resources import RESOURCE_CLAIM_TEMPLATES
from hami_kube.rest import KubeClient
from hami_webhook.dra.claims import ClaimTemplate

__all__ = ["KNOWN_FOR_S", "TemplateWriter"]

KNOWN_FOR_S: Final = 60.0
_MAX_KNOWN: Final = 4096
_TIMEOUT_S: Final = 5.0
"""Below the chart's 10 s webhook timeout, so a slow API server gets our error, not a timeout."""


class TemplateWriter:
    """Creates templates through the API server; remembers the ones it saw exist."""

    def __init__(
        self,
        client: KubeClient,
        *,
        known_for_s: float = KNOWN_FOR_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._known_for = known_for_s
        self._clock = clock
        self._known: dict[tuple[str, str], float] = {}
        self.posts = 0
        """POSTs sent (for tests and the metrics)."""

    async def ensure(self, templates: Iterable[ClaimTemplate]) -> None:
        """Create each template unless it exists; raises ``KubeError`` for any other answer."""
        now = self._clock()
        for template in templates:
            key = (template.namespace, template.name)
            seen = self._known.get(key)
            if seen is not None and now - seen < self._known_for:
                continue
            self.posts += 1
            with contextlib.suppress(AlreadyExistsError):
                await self._client.request(
                    "POST",
                    RESOURCE_CLAIM_TEMPLATES.collection_path(template.namespace),
                    body=template.body,
                    timeout_s=_TIMEOUT_S,
                )
            self._remember(key, now)

    def _remember(self, key: tuple[str, str], now: float) -> None:
        if len(self._known) >= _MAX_KNOWN:
            # Drop the expired ones; if all are fresh, forget everything (a POST each is cheap).
            fresh = {k: t for k, t in self._known.items() if now - t < self._known_for}
            self._known = fresh if len(fresh) < _MAX_KNOWN else {}
        self._known[key] = now
