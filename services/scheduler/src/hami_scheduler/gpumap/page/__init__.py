"""The GPU map's HTML pages, rendered on the server from the JSON documents the API serves.

``render_page(kind, doc, query)`` turns one document of ``docs/gpumap.md`` (``GpuMap``,
``PendingGpuPods``, ``FitProbe`` or ``{"error": ...}``) into a whole HTML5 page.  Pure: no I/O, no
clock (times shown are relative to the document's own ``generatedAt``).

Why it looks the way it does:

- The page is served under ``kubectl port-forward``, the API server's service proxy
  (``/api/v1/namespaces/<ns>/services/<svc>:gpumap/proxy/``) and Ingress sub-paths, so every
  link and form action is relative (``./``, ``./pending``, ``./fit``); none starts with ``/``.
- The CSP allows inline styles and nothing else (no scripts, no outside fetches), so bars are
  inline-styled ``div``s, refresh is ``<meta http-equiv="refresh">`` (only while the query
  carries ``refresh=``; a link turns it on and off), filters and paging are GET forms and links,
  and the manifest form submits its raw text as ``manifestText`` (base64 would need a script).
- Every value comes from cluster objects (pod names, annotations) and is escaped; numbers too,
  since a document is only as typed as the code that built it.
- Colour never carries meaning alone: every status has a word and a symbol beside it, every bar
  its numbers in text, and each holder's segment carries the holder's ordinal.
- Cost is linear in the document (one list of strings joined once); the server pages nodes, so
  a 5,000-node cluster costs what one page of it costs, and renders in steps (``render_steps``,
  one per node) so that a filter never waits for a whole page.

One concern a module, so that a change to one view reads and reviews on its own:

- :mod:`.shell` — the frame every page shares (head, CSS, navigation, the meta line) and the
  dispatch to a view; :func:`render_page` and :func:`render_steps` live there;
- :mod:`.text` — escaping and the small formatters (MiB, %, times, durations, status flags);
- :mod:`.links` — relative links and GET forms: what each page carries over from its query
  (filters, paging, auto-refresh);
- :mod:`.nodes` (the map: cluster summary, filter, one section per node) with :mod:`.cards`
  (one table row per card: bars, shares, holders, measured usage);
- :mod:`.pending` — the pending-pods table; :mod:`.fit` — the "would it fit?" forms and answer.
"""

from __future__ import annotations

from hami_scheduler.gpumap.page.shell import render_page, render_steps

__all__ = ["render_page", "render_steps"]
