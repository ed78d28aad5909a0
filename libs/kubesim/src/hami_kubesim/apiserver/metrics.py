"""Requests the API server answered, counted as kube-apiserver counts them, per client too.

Two counters, served on ``/metrics`` in the Prometheus text format:

* ``apiserver_request_total{verb,resource,subresource,code}`` — kube-apiserver's metric with the
  labels that say what a request cost (kube-apiserver adds ``group``, ``version``, ``scope``,
  ``component`` and ``dry_run``). ``verb`` is kube-apiserver's: ``GET`` (one object), ``LIST``,
  ``WATCH``, ``POST`` (create), ``PUT`` (update), ``PATCH``, ``APPLY`` (a server-side apply
  patch, which kubesim refuses), ``DELETE``, ``DELETECOLLECTION``. ``resource`` is the plural
  (``pods``), ``subresource`` e.g. ``status`` or ``binding`` (empty for the object itself; the
  legacy ``namespaces/<ns>/bindings`` path counts as resource ``bindings``); ``code`` the HTTP
  status of the answer.
* ``kubesim_client_requests_total{client,verb,resource,subresource,code}`` — the same, by
  client: the first token of the request's ``User-Agent`` before ``/`` (``hami-scheduler``,
  ``kubelet/node-a`` → ``kubelet``; ``unknown`` when there is none).

Only resource requests are counted (discovery, ``/_sim``, health and ``/metrics`` are not), and
only requests sent over HTTP (in-process calls on :class:`~.server.ApiServer` are the test
driver's, not a component's). A request is counted when it is answered; a watch when its
stream starts (its answer is 200; an error before it starts is counted with its code); a request
whose client went away before it was answered is not counted. Injected faults are answers and
are counted with their code.

:meth:`RequestCounter.counts` is the in-process accessor: a frozen :class:`RequestCounts` that
sums by any labels and subtracts an earlier snapshot, so a test or a bench reads what one step
cost without scraping.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Final

from hami_kubesim.objects.patching import APPLY_PATCH

__all__ = [
    "APISERVER_REQUESTS",
    "CLIENT_REQUESTS",
    "RequestCounter",
    "RequestCounts",
    "RequestKey",
    "client_name",
    "kube_verb",
]

APISERVER_REQUESTS: Final = "apiserver_request_total"
CLIENT_REQUESTS: Final = "kubesim_client_requests_total"
UNKNOWN_CLIENT: Final = "unknown"

_VERBS: Final = {
    "get": "GET",
    "list": "LIST",
    "watch": "WATCH",
    "create": "POST",
    "update": "PUT",
    "patch": "PATCH",
    "delete": "DELETE",
    "deletecollection": "DELETECOLLECTION",
}


def kube_verb(verb: str, media_type: str = "") -> str:
    """kube-apiserver's ``verb`` label for kubesim's request verb (``create`` → ``POST``);
    ``media_type`` is the request's content type without parameters."""
    if verb == "patch" and media_type == APPLY_PATCH:
        return "APPLY"
    return _VERBS.get(verb, verb.upper())


def client_name(user_agent: str | None) -> str:
    """The client a ``User-Agent`` names: its first token before ``/``."""
    first = (user_agent or "").strip().split(" ", 1)[0]
    return first.split("/", 1)[0] or UNKNOWN_CLIENT


@dataclass(frozen=True, slots=True, order=True)
class RequestKey:
    """One series: who sent what, and the answer's code."""

    client: str
    verb: str
    resource: str
    subresource: str
    code: str


_LABELS: Final = tuple(f.name for f in fields(RequestKey))


def _check_labels(names: Iterable[str]) -> None:
    unknown = set(names) - set(_LABELS)
    if unknown:
        raise ValueError(f"unknown labels {sorted(unknown)}; use {list(_LABELS)}")


@dataclass(frozen=True, slots=True)
class RequestCounts:
    """A snapshot of the counts (see :meth:`RequestCounter.counts`)."""

    series: Counter[RequestKey] = field(default_factory=Counter)

    def count(self, **labels: str | int) -> int:
        """Requests whose labels are all equal to ``labels`` (``code`` may be an int)."""
        return sum(n for _, n in self._matching(labels))

    def by(self, *labels: str, **where: str | int) -> Counter[tuple[str, ...]]:
        """Counts summed per value of ``labels`` (e.g. ``by("client", "verb")``), among the
        requests matching ``where``."""
        _check_labels(labels)
        out: Counter[tuple[str, ...]] = Counter()
        for key, n in self._matching(where):
            out[tuple(getattr(key, name) for name in labels)] += n
        return out

    def _matching(self, where: Mapping[str, str | int]) -> Iterator[tuple[RequestKey, int]]:
        _check_labels(where)
        wanted = {name: str(value) for name, value in where.items()}
        for key, n in self.series.items():
            if all(getattr(key, name) == value for name, value in wanted.items()):
                yield key, n

    def since(self, earlier: RequestCounts) -> RequestCounts:
        """What was counted after ``earlier`` was taken."""
        return RequestCounts(self.series - earlier.series)

    def total(self) -> int:
        return sum(self.series.values())


class RequestCounter:
    """The live counters of one API server."""

    def __init__(self) -> None:
        self._series: Counter[RequestKey] = Counter()

    def record(self, *, client: str, verb: str, resource: str, subresource: str, code: int) -> None:
        self._series[RequestKey(client, verb, resource, subresource, str(code))] += 1

    def counts(self) -> RequestCounts:
        return RequestCounts(Counter(self._series))

    def reset(self) -> None:
        self._series.clear()

    def render(self) -> str:
        """Both counters in the Prometheus text exposition format (version 0.0.4)."""
        server: Counter[tuple[str, ...]] = Counter()
        for key, n in self._series.items():
            server[(key.verb, key.resource, key.subresource, key.code)] += n
        lines = [
            f"# HELP {APISERVER_REQUESTS} Counter of apiserver requests broken out for each verb, "
            "resource, subresource and HTTP response code.",
            f"# TYPE {APISERVER_REQUESTS} counter",
        ]
        lines += _samples(APISERVER_REQUESTS, ("verb", "resource", "subresource", "code"), server)
        lines += [
            f"# HELP {CLIENT_REQUESTS} Requests answered by the API server, by client (the "
            "first token of its User-Agent), verb, resource, subresource and code.",
            f"# TYPE {CLIENT_REQUESTS} counter",
        ]
        per_client = Counter({_values(key): n for key, n in self._series.items()})
        lines += _samples(CLIENT_REQUESTS, _LABELS, per_client)
        return "\n".join(lines) + "\n"


def _values(key: RequestKey) -> tuple[str, ...]:
    return tuple(getattr(key, name) for name in _LABELS)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _samples(name: str, labels: tuple[str, ...], series: Counter[tuple[str, ...]]) -> Iterable[str]:
    for values, n in sorted(series.items()):
        text = ",".join(f'{label}="{_escape(v)}"' for label, v in zip(labels, values, strict=True))
        yield f"{name}{{{text}}} {n}"
