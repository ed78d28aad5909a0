"""Helpers of the plugin's tests: the contract documents, what the stand-in saw, a plugin run."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

CONTRACT = Path(__file__).parent / "contract"
PLUGIN = Path(sys.executable).parent / "kubectl-hami"


def contract(name: str) -> dict[str, Any]:
    document = json.loads((CONTRACT / f"{name}.json").read_text())
    assert isinstance(document, dict)
    return document


@dataclass
class StandIn:
    """What the stand-in was asked: ``(path, query)`` per request."""

    port: int
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)


def answer_fit(query: dict[str, str]) -> web.Response:
    if "manifest" in query:
        padded = query["manifest"] + "=" * (-len(query["manifest"]) % 4)
        text = base64.urlsafe_b64decode(padded).decode()
        if "kind: Pod" not in text:
            return web.json_response(
                {"error": "manifest: line 1: not a Pod (kind is missing)"}, status=400
            )
        fits = "20000" not in text
    else:
        fits = int(query.get("memory", "0")) <= 15360
    return web.json_response(contract("fit-fits" if fits else "fit-nofit"))


@dataclass(frozen=True)
class Result:
    status: int
    stdout: str
    stderr: str


Plugin = Callable[..., Awaitable[Result]]
