"""What each command asks the GPU map API: the path and the query (pure).

The fit probe takes a request's dimensions as query parameters, or a manifest as
``manifest=<base64url>`` (at most 64 KiB decoded, as the API bounds it).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Final

from hami_kubectl.options import FitRequest, Invocation
from hami_kubectl.outcome import CommandError, Exit

MAX_MANIFEST_BYTES: Final = 64 * 1024
API_VERSION: Final = "gpumap.hami.io/v1"
KINDS: Final = {"map": "GpuMap", "pending": "PendingGpuPods", "fit": "FitProbe"}


@dataclass(frozen=True, slots=True)
class ApiCall:
    path: str
    query: dict[str, str]


def _paging(invocation: Invocation, query: dict[str, str]) -> None:
    if invocation.page != 1:
        query["page"] = str(invocation.page)
    if invocation.per_page is not None:
        query["perPage"] = str(invocation.per_page)


def fit_query(request: FitRequest, manifest: bytes | None) -> dict[str, str]:
    """The fit probe's query: the manifest's bytes when there are any, else the dimensions."""
    if manifest is not None:
        if len(manifest) > MAX_MANIFEST_BYTES:
            raise CommandError(
                Exit.USAGE,
                f"the manifest is {len(manifest)} bytes; the fit probe takes at most "
                f"{MAX_MANIFEST_BYTES} (64 KiB)",
            )
        if not manifest.strip():
            raise CommandError(Exit.USAGE, "the manifest is empty")
        return {"manifest": base64.urlsafe_b64encode(manifest).decode().rstrip("=")}
    pairs = {
        "gpus": request.gpus,
        "memory": request.memory,
        "memoryPercentage": request.memory_percentage,
        "cores": request.cores,
        "type": request.type,
        "vendor": request.vendor,
    }
    return {key: str(value) for key, value in pairs.items() if value is not None}


def api_call(invocation: Invocation, manifest: bytes | None = None) -> ApiCall:
    """The GET the invocation makes (``manifest``: the bytes of ``fit -f``)."""
    query: dict[str, str] = {}
    if invocation.command == "map":
        for key, value in (("node", invocation.node), ("vendor", invocation.vendor)):
            if value:
                query[key] = value
        if invocation.fragmented:
            query["fragmented"] = "1"
        _paging(invocation, query)
        return ApiCall("api/v1/map", query)
    if invocation.command == "pending":
        if invocation.namespace:
            query["namespace"] = invocation.namespace
        _paging(invocation, query)
        return ApiCall("api/v1/pending", query)
    return ApiCall("api/v1/fit", fit_query(invocation.fit, manifest))


def check_document(command: str, document: dict[str, object]) -> None:
    """Refuse an answer that is not the GPU map API document this command reads."""
    want = KINDS[command]
    if document.get("apiVersion") != API_VERSION or document.get("kind") != want:
        got = f"{document.get('apiVersion')!s}/{document.get('kind')!s}"
        raise CommandError(
            Exit.BAD_ANSWER,
            f"the scheduler answered with {got}, not {API_VERSION}/{want}: is it a release "
            "with the GPU map, and is --port the GPU map's port?",
        )


__all__ = [
    "API_VERSION",
    "MAX_MANIFEST_BYTES",
    "ApiCall",
    "api_call",
    "check_document",
    "fit_query",
]
