"""The checks a write makes of its body and of the stored object it names, before it runs.

Pure: the URL's name against the body's, the resourceVersion and uid preconditions of an update
and of a delete (``DeleteOptions.preconditions``), and the name a create needs, each raising
the :class:`.errors.StatusError` kube-apiserver answers with.  Kept apart from :mod:`.store` so
the write verbs there read as the steps they take.
"""

from __future__ import annotations

from typing import Any

from hami_kubesim.apiserver.errors import (
    BadRequestError,
    ConflictError,
    InvalidError,
    precondition_failed,
)
from hami_kubesim.objects.resources import ResourceType


def name_required(rt: ResourceType) -> InvalidError:
    """A create whose body has neither ``metadata.name`` nor ``generateName``."""
    return InvalidError(
        rt.kind,
        rt.group,
        "",
        [
            (
                "metadata.name",
                "FieldValueRequired",
                "Required value: name or generateName is required",
            )
        ],
    )


def check_name_matches(meta: dict[str, Any], name: str) -> None:
    """The body of a PUT or PATCH names the object of the URL."""
    if meta.get("name") != name:
        raise BadRequestError(
            f"the name of the object ({meta.get('name', '')}) does not match the name on "
            f"the URL ({name})"
        )


def check_update(
    rt: ResourceType, name: str, meta: dict[str, Any], old_meta: dict[str, Any]
) -> None:
    """PUT: the body's resourceVersion (required unless the type allows unconditional updates)
    and uid, when set, are the stored object's."""
    given_rv = meta.get("resourceVersion")
    if not given_rv:
        if not rt.allow_unconditional_update:
            raise InvalidError(
                rt.kind,
                rt.group,
                name,
                [
                    (
                        "metadata.resourceVersion",
                        "FieldValueInvalid",
                        "Invalid value: 0x0: must be specified for an update",
                    )
                ],
            )
    elif given_rv != old_meta["resourceVersion"]:
        raise ConflictError(rt.plural, rt.group, name)
    uid = meta.get("uid")
    if uid and uid != old_meta["uid"]:
        raise ConflictError(
            rt.plural,
            rt.group,
            name,
            precondition_failed("UID", uid, old_meta["uid"]),
        )


def check_delete(
    rt: ResourceType, name: str, options: dict[str, Any] | None, meta: dict[str, Any]
) -> None:
    """DELETE: the uid and resourceVersion of ``options``' preconditions, when set, are the
    stored object's."""
    pre = (options or {}).get("preconditions") or {}
    if pre.get("uid") and pre["uid"] != meta["uid"]:
        raise ConflictError(
            rt.plural,
            rt.group,
            name,
            precondition_failed("UID", pre["uid"], meta["uid"]),
        )
    if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
        raise ConflictError(
            rt.plural,
            rt.group,
            name,
            precondition_failed("ResourceVersion", pre["resourceVersion"], meta["resourceVersion"]),
        )
