"""Map request paths to API targets: discovery documents or a resource (collection, object,
subresource), with the cluster-scoped versus namespaced rules of the real API server."""

from __future__ import annotations

from dataclasses import dataclass

from hami_kubesim.apiserver.errors import StatusError
from hami_kubesim.objects.resources import PODS, Registry, ResourceType


@dataclass(frozen=True, slots=True)
class Target:
    """A resource request: ``name`` is empty for collections."""

    rt: ResourceType
    namespace: str | None
    name: str
    subresource: str | None
    watch_path: bool = False
    legacy_binding: bool = False

    def fault_names(self) -> tuple[str, ...]:
        """Spellings a fault rule may use for this target."""
        suffix = f"/{self.subresource}" if self.subresource else ""
        if self.rt.group:
            return (self.rt.plural + suffix, self.rt.key + suffix)
        return (self.rt.plural + suffix,)


@dataclass(frozen=True, slots=True)
class Discovery:
    """A discovery request: ``what`` is ``api``, ``apis``, ``group`` or ``resources``."""

    what: str
    group: str = ""
    version: str = ""


def not_found() -> StatusError:
    return StatusError(404, "the server could not find the requested resource", details={})


def parse(registry: Registry, path: str) -> Target | Discovery:
    """Raise a 404 ``StatusError`` for paths that name nothing we serve."""
    segs = [s for s in path.split("/") if s]
    if not segs:
        raise not_found()
    if segs[0] == "api":
        if len(segs) == 1:
            return Discovery("api")
        group, version, rest = "", segs[1], segs[2:]
    elif segs[0] == "apis":
        if len(segs) == 1:
            return Discovery("apis")
        if len(segs) == 2:
            return Discovery("group", segs[1])
        group, version, rest = segs[1], segs[2], segs[3:]
    else:
        raise not_found()
    if not registry.in_group_version(group, version):
        raise not_found()
    if not rest:
        return Discovery("resources", group, version)
    watch_path = rest[0] == "watch"
    if watch_path:
        rest = rest[1:]
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces" and not group:
        if rest[2] in ("status", "finalize") and len(rest) == 3:
            return _target(
                registry,
                group=group,
                version=version,
                rest=["namespaces", rest[1], rest[2]],
                namespace=None,
                watch_path=watch_path,
            )
        namespace, rest = rest[1], rest[2:]
        if rest == ["bindings"] and not watch_path:
            return Target(PODS, namespace, "", "binding", legacy_binding=True)
    elif len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    return _target(
        registry,
        group=group,
        version=version,
        rest=rest,
        namespace=namespace,
        watch_path=watch_path,
    )


def _target(
    registry: Registry,
    *,
    group: str,
    version: str,
    rest: list[str],
    namespace: str | None,
    watch_path: bool,
) -> Target:
    if not rest or len(rest) > 3:
        raise not_found()
    rt = registry.lookup(group, version, rest[0])
    if rt is None:
        raise not_found()
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else None
    if rt.namespaced:
        if namespace is None and name:
            raise not_found()  # namespaced objects are only addressed inside a namespace
    elif namespace is not None:
        raise not_found()
    if sub is not None and sub not in rt.subresources:
        raise not_found()
    return Target(rt, namespace, name, sub, watch_path)
