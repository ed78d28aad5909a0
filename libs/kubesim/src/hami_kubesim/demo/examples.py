"""The demo's examples: the folders of ``deploy/examples`` it submits and the documents it
reads from them (PriorityClasses, claim templates, claims and pods, in file order).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from hami_kubesim.stack.system.spec import REPO_ROOT

EXAMPLES_DIR = REPO_ROOT / "deploy" / "examples"
VENDOR_EXAMPLES = "vendors"
"""The examples dir's sub-folder of pods for the other vendors' nodes (the demo's own: the
compose stack has GPU nodes only)."""
PREEMPTION_EXAMPLES = "preemption"
"""The sub-folder of the preemption example: the demo's own too (it needs ``gpu-node-p``, the
PriorityClasses and the capacity totals mode, none of which the compose stack has)."""
DRA_EXAMPLES = "dra"
"""The sub-folder of the DRA examples (claims, templates and the pods using them): the demo's
own (they need ``gpu-node-dra``)."""
EXAMPLE_KINDS = ("PriorityClass", "ResourceClaimTemplate", "ResourceClaim", "Pod")
"""The documents the demo creates from the example files, in file order."""


def load_examples(directory: Path) -> list[dict[str, Any]]:
    """Every document of ``directory/*.yaml`` of a kind in :data:`EXAMPLE_KINDS`, files in name
    order and documents in file order (a PriorityClass before the pods naming it)."""
    documents: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(document, dict) and document.get("kind", "Pod") in EXAMPLE_KINDS:
                documents.append(document)
    return documents


def pods_of(documents: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods among ``documents`` (a document without ``kind`` is a pod)."""
    return [d for d in documents if d.get("kind", "Pod") == "Pod"]
