"""The tables of ``kubectl hami`` (pure: documents in, text out)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from hami_kubectl.options import Invocation
from hami_kubectl.views.fit import render_fit
from hami_kubectl.views.gpumap import render_map
from hami_kubectl.views.pending import render_pending


def render(invocation: Invocation, document: dict[str, Any], now: datetime) -> str:
    """The text the invocation prints for ``document`` (``-o table`` or ``-o wide``)."""
    wide = invocation.output == "wide"
    if invocation.command == "map":
        return render_map(document, wide=wide, now=now)
    if invocation.command == "pending":
        return render_pending(document, wide=wide, now=now)
    return render_fit(document, wide=wide)


__all__ = ["render", "render_fit", "render_map", "render_pending"]
