"""Write semantics of kube-apiserver v1.31 that sit between the HTTP verbs and the store.

Matched against k8s.io/apiserver v0.31.9 and k8s.io/apimachinery v0.31.9:
- registry/generic/registry/store.go Update: a PUT without metadata.resourceVersion is
  refused unless the type's strategy AllowUnconditionalUpdate (CRDs: false; routes: false
  in openshift-apiserver; the core types served here: true);
- storage/etcd3/store.go Create: ErrResourceVersionSetOnCreate, which no registry turns into
  a Status, so it answers 500 with an empty reason;
- the strategies' PrepareForCreate: a CRD with the status subresource drops `.status`
  (apiextensions customResourceStrategy), a Route resets it (pods, services and namespaces
  are reset by sandbox/apiserver/defaults.py);
- api/validation/objectmeta.go ValidateNoNewFinalizers (through ValidateObjectMetaUpdate);
- runtime/conversion.go string_to_int64: a malformed integer query parameter is a 400 with
  strconv's words;
- apis/meta/v1/validation ValidateDeleteOptions: propagationPolicy and orphanDependents.
"""

from __future__ import annotations

from . import errors
from .errors import ApiError

# Types whose update strategy allows an update without resourceVersion (AllowUnconditionalUpdate).
UNCONDITIONAL_UPDATE = {("", p) for p in ("namespaces", "pods", "services", "secrets", "configmaps", "events",
                                          "serviceaccounts", "nodes")} | {
    ("rbac.authorization.k8s.io", p) for p in ("roles", "rolebindings", "clusterroles", "clusterrolebindings")}

ORPHAN, FOREGROUND, BACKGROUND = "Orphan", "Foreground", "Background"
ORPHAN_FINALIZER, FOREGROUND_FINALIZER = "orphan", "foregroundDeletion"


def _uint(value) -> int | None:
    """APIObjectVersioner.ObjectResourceVersion: "" is 0; what does not parse is not checked."""
    if value in (None, ""):
        return 0
    try:
        rv = int(str(value))
    except ValueError:
        return None
    return rv if rv >= 0 else None


def require_resource_version(rt, name: str, obj: dict) -> None:
    """A PUT of a type without unconditional updates must carry the resourceVersion it read."""
    if rt.key in UNCONDITIONAL_UPDATE:
        return
    if _uint((obj.get("metadata") or {}).get("resourceVersion")) == 0:
        # The registry store builds the GroupKind from the resource (see #18526 upstream) and
        # formats the uint64 0 with %#v.
        raise errors.invalid(rt, name, [("metadata.resourceVersion", "Invalid value: 0x0: must be specified for an update")],
                             kind=rt.plural)


def refuse_resource_version_on_create(obj: dict) -> None:
    """etcd3 refuses to create an object that carries a resourceVersion (dry-run never reaches it)."""
    rv = _uint((obj.get("metadata") or {}).get("resourceVersion"))
    if rv:
        raise ApiError(500, "", "resourceVersion should not be set on objects to be created")


def reset_status_on_create(rt, obj: dict) -> None:
    """PrepareForCreate: a status written on create is dropped where the type has a status subresource."""
    if rt.builtin and rt.key != ("route.openshift.io", "routes"):
        return  # pods, services, namespaces: defaults.py sets their status as their strategies do
    if "status" not in rt.subresources:
        return
    if rt.builtin:
        obj["status"] = {}  # routeStrategy.PrepareForCreate: route.Status = RouteStatus{}
    else:
        obj.pop("status", None)


def refuse_stale(rt, name: str, new: dict, current: dict) -> None:
    """GuaranteedUpdate's optimistic lock: a resourceVersion other than the stored one is 409."""
    given = (new.get("metadata") or {}).get("resourceVersion")
    if given and given != current["metadata"].get("resourceVersion"):
        raise errors.conflict(rt, name)


def refuse_new_finalizers(rt, old: dict, new: dict) -> None:
    """ValidateObjectMetaUpdate: an object being deleted takes no new finalizers."""
    if not old["metadata"].get("deletionTimestamp"):
        return
    extra = sorted(set(new["metadata"].get("finalizers") or []) - set(old["metadata"].get("finalizers") or []))
    if extra:
        shown = ", ".join(f'"{f}"' for f in extra)
        raise errors.invalid(rt, old["metadata"]["name"], [
            ("metadata.finalizers", "Forbidden: no new finalizers can be added if the object is being deleted, "
             f"found new finalizers []string{{{shown}}}")], reason="FieldValueForbidden")


def query_int(query: dict, key: str) -> int | None:
    """An integer query parameter as the parameter codec converts it: absent -> None,
    malformed -> 400 with strconv.ParseInt's words."""
    values = query.get(key)
    if not values:
        return None
    return parse_int64(values[0])


def parse_int64(value) -> int:
    text = str(value)
    try:
        number = int(text, 10)
        if text.strip() != text or "_" in text:
            raise ValueError
    except ValueError:
        raise errors.bad_request(f'strconv.ParseInt: parsing "{text}": invalid syntax') from None
    if not -(2 ** 63) <= number < 2 ** 63:
        raise errors.bad_request(f'strconv.ParseInt: parsing "{text}": value out of range')
    return number


def propagation_policy(query: dict, options: dict) -> str | None:
    """DeleteOptions.propagationPolicy (body over query), orphanDependents folded in, validated."""
    policy = options.get("propagationPolicy", (query.get("propagationPolicy") or [None])[0])
    orphan = options.get("orphanDependents", (query.get("orphanDependents") or [None])[0])
    if isinstance(orphan, str):
        orphan = orphan not in ("0",) and orphan.lower() != "false"
    causes = []
    if orphan is not None and policy is not None:
        causes.append(("propagationPolicy", f'Invalid value: "{policy}": orphanDependents and deletionPropagation '
                       "cannot be both set", "FieldValueInvalid"))
    if policy is not None and policy not in (FOREGROUND, BACKGROUND, ORPHAN):
        causes.append(("propagationPolicy", f'Unsupported value: "{policy}": supported values: "Foreground", '
                       '"Background", "Orphan", "nil"', "FieldValueNotSupported"))
    if causes:
        parts = [f"{f}: {m}" for f, m, _ in causes]
        joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
        raise ApiError(422, "Invalid", f'DeleteOptions.meta.k8s.io "" is invalid: {joined}',
                       {"group": "meta.k8s.io", "kind": "DeleteOptions",
                        "causes": [{"reason": r, "message": m, "field": f} for f, m, r in causes]})
    if policy is None and orphan is not None:
        return ORPHAN if orphan else BACKGROUND
    return policy
