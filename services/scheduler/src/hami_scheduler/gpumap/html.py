"""The GPU map's HTML page: rendered on the server from the same JSON documents the API serves.

Placeholder: the real renderer is written on branch ``gmpage`` and replaces this module at merge.
Only the signature is the contract: ``render_page(kind, doc, query) -> str``, where ``kind`` is
``"map"``, ``"pending"``, ``"fit"`` or ``"error"``, ``doc`` the JSON document the API would answer,
and ``query`` the request's query parameters.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["render_page"]


def render_page(kind: str, doc: dict[str, Any], query: Mapping[str, str]) -> str:
    """A whole HTML document showing ``doc`` (escaped, relative URLs only)."""
    del query
    body = html.escape(json.dumps(doc, indent=2, sort_keys=True, default=str))
    title = html.escape(f"GPU map: {kind}")
    return (
        "<!doctype html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{title}</title></head>'
        f'<body><nav><a href="./">map</a> <a href="./pending">pending</a> '
        f'<a href="./fit">fit</a></nav><h1>{title}</h1><pre>{body}</pre></body></html>\n'
    )
