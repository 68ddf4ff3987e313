"""The object store behind the API server: etcd plus the apiserver's object bookkeeping.

uid, resourceVersion (one counter for all objects), generation (bumped on spec changes),
creationTimestamp, generateName, finalizers with deletionTimestamp, graceful deletion of
pods and namespaces, garbage collection through ownerReferences, built-in admission that
every writer passes (controllers too, as they do through a real apiserver), and an event
log that watches and controllers read.

Deletion follows kube-apiserver v1.31 (staging/src/k8s.io/apiserver/pkg/registry/rest/delete.go
BeforeDelete, registry/generic/registry/store.go markAsDeleting / shouldDeleteDuringUpdate,
pkg/registry/core/pod/strategy.go CheckGracefulDelete, pkg/registry/core/namespace/storage).
"""

from __future__ import annotations

import copy
import json
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from . import errors

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_SCALARS = (str, int, float, bool, type(None))


def clone(obj):
    """A deep copy of what the store holds (JSON: dicts, lists, scalars; anything else through
    copy.deepcopy). About 3x faster than copy.deepcopy, in which the controllers' lists spent
    a fifth of a sandbox's CPU."""
    t = type(obj)
    if t is dict:
        return {k: v if type(v) in _SCALARS else clone(v) for k, v in obj.items()}
    if t is list:
        return [v if type(v) in _SCALARS else clone(v) for v in obj]
    return obj if t in _SCALARS else copy.deepcopy(obj)


def now_rfc3339(offset_s: float = 0.0) -> str:
    return (datetime.now(UTC) + timedelta(seconds=offset_s)).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(value: str) -> datetime:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


PODS, NAMESPACES = ("", "pods"), ("", "namespaces")
# etcd's default --max-request-bytes (etcd server/embed/config.go DefaultMaxRequestBytes; OpenShift
# leaves it as is). A write is the object as stored: JSON here, for every type; kube-apiserver stores
# built-in types as protobuf, a little smaller, so a built-in object near the limit is refused here
# somewhat earlier than there (docs/sandbox.md). Custom resources (a Workflow, a RayCluster) are JSON there too.
ETCD_MAX_REQUEST_BYTES = 1572864

# A built-in admission plugin: (resource type, new object) -> None; may default fields of
# the object or raise ApiError to refuse the create.
CreateAdmission = Callable[[object, dict], None]


def random_suffix(n: int = 5) -> str:
    return "".join(random.choice(_NAME_CHARS) for _ in range(n))


def _check_size(obj: dict) -> None:
    if len(json.dumps(obj, separators=(",", ":"))) > ETCD_MAX_REQUEST_BYTES:
        raise errors.request_too_large()


class Event:
    """One change: the object after it, and `prev`, the object as it was before (None for
    ADDED), which the watch cache filters on and a LIST at an older revision rolls back to."""

    __slots__ = ("rv", "type", "key", "namespace", "obj", "prev")

    def __init__(self, rv, type_, key, namespace, obj, prev=None):
        self.rv, self.type, self.key, self.namespace, self.obj, self.prev = rv, type_, key, namespace, obj, prev


class Store:
    def __init__(self, history: int = 20000):
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.rv = 0
        self._objects: dict[tuple, dict[tuple, dict]] = {}
        self.events: deque[Event] = deque(maxlen=history)
        self._latest: dict[tuple, dict] = {}  # (type key, ident) -> its last event's object
        self.types: dict[tuple, object] = {}
        # Built-in admission on create, for every writer: `admission` runs before the name is
        # generated (mutating plugins: NamespaceLifecycle, ServiceAccount), `validation` after
        # (validating plugins and storage: ResourceQuota, the ClusterIP allocator).
        self.admission: list[CreateAdmission] = []
        self.validation: list[CreateAdmission] = []
        # A pod's grace period when neither the request nor its spec gives one (seconds).
        self.default_grace: Callable[[], float] = lambda: 30.0
        self._dry = False  # within a dry-run delete (under the lock): compute, change nothing

    # --- helpers ---------------------------------------------------------------
    def _bucket(self, rt) -> dict:
        self.types[rt.key] = rt
        return self._objects.setdefault(rt.key, {})

    def _ident(self, rt, namespace, name):
        return (namespace if rt.namespaced else None, name)

    def _record(self, type_, rt, obj):
        if self._dry:
            return
        meta = obj["metadata"]
        slot = (rt.key, self._ident(rt, meta.get("namespace"), meta["name"]))
        after = clone(obj)
        prev = self._latest.pop(slot, None) if type_ == "DELETED" else self._latest.get(slot)
        if type_ != "DELETED":
            self._latest[slot] = after
        self.events.append(Event(self.rv, type_, rt.key, meta.get("namespace"), after,
                                 None if type_ == "ADDED" else prev))
        self.changed.notify_all()

    def _bump(self, obj):
        if self._dry:
            return
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)

    # --- reads -----------------------------------------------------------------
    def get(self, rt, namespace, name) -> dict:
        with self.lock:
            obj = self._bucket(rt).get(self._ident(rt, namespace, name))
            if obj is None:
                raise errors.not_found(rt, name)
            return clone(obj)

    def find(self, rt, namespace, name) -> dict | None:
        with self.lock:
            obj = self._bucket(rt).get(self._ident(rt, namespace, name))
            return clone(obj) if obj is not None else None

    def resource_version(self, rt, namespace, name) -> str | None:
        """An object's resourceVersion (None: not there), without copying the object."""
        with self.lock:
            obj = self._bucket(rt).get(self._ident(rt, namespace, name))
            return None if obj is None else obj["metadata"]["resourceVersion"]

    def select(self, rt, fn: Callable[[dict], object]) -> list:
        """fn of every object of a type, under the lock and without copying them (fn must only
        read): for a controller's question about all of them."""
        with self.lock:
            return [fn(o) for o in self._bucket(rt).values()]

    def list(self, rt, namespace=None, match=None) -> tuple[list[dict], str]:
        with self.lock:
            items = [clone(o) for (ns, _), o in sorted(self._bucket(rt).items(), key=_etcd_order)
                     if (namespace is None or ns == namespace) and (match is None or match(o))]
            return items, str(self.rv)

    def list_at(self, rt, rv: int, namespace=None) -> list[dict] | None:
        """The objects of a type as they were at revision `rv` (etcd's read at a revision),
        sorted by key; None when the history kept no longer reaches back to it (compacted)."""
        with self.lock:
            objects = dict(self._bucket(rt))
            if rv < self.rv:
                events = self.events
                if events and events.maxlen is not None and len(events) >= events.maxlen and events[0].rv > rv + 1:
                    return None
                for ev in reversed(events):
                    if ev.rv <= rv:
                        break
                    if ev.key != rt.key:
                        continue
                    ident = self._ident(rt, ev.namespace, ev.obj["metadata"]["name"])
                    if ev.type == "ADDED" or ev.prev is None:
                        objects.pop(ident, None)
                    else:
                        objects[ident] = ev.prev
            return [clone(o) for (ns, name), o in sorted(objects.items(), key=_etcd_order)
                    if namespace is None or ns == namespace]

    # --- writes ----------------------------------------------------------------
    def check_create(self, rt, obj: dict) -> dict:
        """Name generation and built-in admission of a create, without writing. Returns the
        object as it would be stored."""
        with self.lock:
            obj = clone(obj)
            meta = obj.setdefault("metadata", {})
            for plugin in self.admission:
                plugin(rt, obj)
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + random_suffix()
            if self._ident(rt, meta.get("namespace"), meta["name"]) in self._bucket(rt):
                raise errors.already_exists(rt, meta["name"])
            for plugin in self.validation:
                plugin(rt, obj)
            return obj

    def create(self, rt, obj: dict, dry_run: bool = False) -> dict:
        """Store a new object; dry_run: every check and the bookkeeping, nothing stored (an
        address the ClusterIP allocator gave a dry-run Service is freed by the kube-proxy's repair)."""
        with self.lock:
            obj = self.check_create(rt, obj)
            meta = obj["metadata"]
            bucket = self._bucket(rt)
            ident = self._ident(rt, meta.get("namespace"), meta["name"])
            obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            meta["generation"] = 1
            for k in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
                meta.pop(k, None)
            if dry_run:
                return obj
            _check_size(obj)
            self._bump(obj)
            bucket[ident] = obj
            self._record("ADDED", rt, obj)
            return clone(obj)

    def update(self, rt, obj: dict, subresource: str | None = None, check_rv: bool = True,
               dry_run: bool = False) -> dict:
        """Replace an object (PUT semantics). With a status subresource, the main
        resource ignores status changes and `status` writes only status."""
        with self.lock:
            meta = obj["metadata"]
            bucket = self._bucket(rt)
            ident = self._ident(rt, meta.get("namespace"), meta["name"])
            current = bucket.get(ident)
            if current is None:
                raise errors.not_found(rt, meta["name"])
            if check_rv and meta.get("resourceVersion") and meta["resourceVersion"] != current["metadata"]["resourceVersion"]:
                raise errors.conflict(rt, meta["name"])
            new = clone(obj)
            if subresource == "status":
                merged = clone(current)
                merged["status"] = new.get("status")
                new = merged
            else:
                if "status" in rt.subresources:
                    if "status" in current:
                        new["status"] = clone(current["status"])
                    else:
                        new.pop("status", None)
                # Immutable bookkeeping comes from the stored object.
                for k in ("uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds",
                          "namespace", "name"):
                    if k in current["metadata"]:
                        new["metadata"][k] = current["metadata"][k]
                    else:
                        new["metadata"].pop(k, None)
                if _spec_of(new) != _spec_of(current):
                    new["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
            new["apiVersion"], new["kind"] = rt.api_version, rt.kind
            if new == current:
                return clone(current)
            if dry_run:
                new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                return new
            _check_size(new)
            self._bump(new)
            if _delete_during_update(rt, current, new):
                del bucket[ident]
                self._record("DELETED", rt, new)
                self._collect(new)
                return clone(new)
            bucket[ident] = new
            self._record("MODIFIED", rt, new)
            return clone(new)

    def mutate(self, rt, namespace, name, fn, subresource: str | None = None) -> dict | None:
        """Read-modify-write under the lock (for controllers). Returns None if gone."""
        with self.lock:
            current = self.find(rt, namespace, name)
            if current is None:
                return None
            fn(current)
            return self.update(rt, current, subresource=subresource, check_rv=False)

    def delete(self, rt, namespace, name, grace_period_seconds: int | None = None,
               preconditions: dict | None = None, dry_run: bool = False, propagation: str | None = None) -> dict:
        """DELETE as kube-apiserver does it: a pod is gracefully deleted (deletionTimestamp =
        now + grace, deletionGracePeriodSeconds; the kubelet finishes it with grace 0); a
        namespace turns Terminating; an object with finalizers gets a deletionTimestamp and
        stays until they are removed; anything else goes at once. Returns the object.
        dry_run: the same answer, nothing changed. propagation: DeleteOptions.propagationPolicy
        (Orphan, Foreground, Background; None: the object's GC finalizers, else Background)."""
        with self.lock:
            bucket = self._bucket(rt)
            ident = self._ident(rt, namespace, name)
            current = bucket.get(ident)
            if current is None:
                raise errors.not_found(rt, name)
            _check_preconditions(rt, current, preconditions or {})
            if dry_run:
                self._dry = True
                current = clone(current)
            try:
                answer = self._delete(rt, ident, current, grace_period_seconds, propagation)
            finally:
                self._dry = False
            if not dry_run:
                self._collect_deleting(rt, ident)
            return answer

    def _delete(self, rt, ident, current: dict, grace: int | None, propagation: str | None = None) -> dict:
        meta = current["metadata"]
        if rt.key == NAMESPACES:
            return self._delete_namespace(rt, ident, current)
        if grace is not None and grace < 0:  # negative means 1 s on the delete path
            grace = 1
        pending = (rt.key == PODS and meta.get("deletionTimestamp") and meta.get("deletionGracePeriodSeconds")
                   and (grace is None or grace >= meta["deletionGracePeriodSeconds"]))
        finalizers = gc_finalizers(meta.get("finalizers") or [], propagation)
        if not pending and finalizers != (meta.get("finalizers") or []):
            # deletionFinalizersForGarbageCollection: the GC's finalizers follow the policy
            # (not while a graceful deletion is pending).
            meta["finalizers"] = finalizers
            if not finalizers:
                meta.pop("finalizers")
            if meta.get("deletionTimestamp") and not meta.get("deletionGracePeriodSeconds") and finalizers:
                return self._finalizing(rt, current)
        if rt.key == PODS:
            done = self._delete_pod_gracefully(rt, current, grace)
            if done is not None:
                return done
        if meta.get("finalizers"):
            self._mark_deleting(rt, current)
            return clone(current)
        return self._remove(rt, ident, current)

    def _remove(self, rt, ident, current: dict) -> dict:
        if self._dry:
            return clone(current)
        del self._bucket(rt)[ident]
        self._bump(current)
        self._record("DELETED", rt, current)
        self._collect(current)
        return clone(current)

    def _mark_deleting(self, rt, current: dict) -> None:
        """markAsDeleting: deletionTimestamp now (or kept if earlier), grace 0, generation bumped once."""
        meta = current["metadata"]
        if meta.get("deletionTimestamp") and meta.get("deletionGracePeriodSeconds", 0) == 0:
            return
        if not meta.get("deletionTimestamp") and meta.get("generation"):
            meta["generation"] += 1
        if not meta.get("deletionTimestamp") or parse_rfc3339(meta["deletionTimestamp"]) > datetime.now(UTC):
            meta["deletionTimestamp"] = now_rfc3339()
        meta["deletionGracePeriodSeconds"] = 0
        self._bump(current)
        self._record("MODIFIED", rt, current)

    def _pod_grace(self, pod: dict, requested: int | None) -> int:
        """CheckGracefulDelete for pods: the request's grace, else the spec's, else the
        platform default; 0 for a pod never scheduled or already finished."""
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        if requested is not None:
            period = requested
        elif spec.get("terminationGracePeriodSeconds") is not None:
            period = int(spec["terminationGracePeriodSeconds"])
        else:
            period = int(self.default_grace())
        if not spec.get("nodeName") or status.get("phase") in ("Failed", "Succeeded"):
            period = 0
        return 1 if period < 0 else period

    def _delete_pod_gracefully(self, rt, current: dict, grace: int | None) -> dict | None:
        """The graceful part of a pod DELETE; None when the pod must go (or be finalized) now."""
        meta = current["metadata"]
        if meta.get("deletionTimestamp"):
            existing = meta.get("deletionGracePeriodSeconds")
            if not existing:
                return None  # already at grace 0: delete now (or wait for finalizers)
            if grace is None or grace >= existing:
                return clone(current)  # graceful deletion pending: only a shorter grace counts
            # Shorten: move the deadline back, never into the past (then 1 s unless 0 was asked).
            deadline = parse_rfc3339(meta["deletionTimestamp"]) - timedelta(seconds=existing - grace)
            now = datetime.now(UTC)
            period = grace
            if deadline < now:
                deadline = now
                if period != 0:
                    period = 1
            meta["deletionTimestamp"] = deadline.strftime("%Y-%m-%dT%H:%M:%SZ")
            meta["deletionGracePeriodSeconds"] = period
        else:
            period = self._pod_grace(current, grace)
            if period == 0:
                return None
            meta["deletionTimestamp"] = now_rfc3339(period)
            meta["deletionGracePeriodSeconds"] = period
            if meta.get("generation"):
                meta["generation"] += 1
        if meta["deletionGracePeriodSeconds"] == 0:
            return None if not meta.get("finalizers") else self._finalizing(rt, current)
        self._bump(current)
        self._record("MODIFIED", rt, current)
        return clone(current)

    def _finalizing(self, rt, current: dict) -> dict:
        self._bump(current)
        self._record("MODIFIED", rt, current)
        return clone(current)

    def _delete_namespace(self, rt, ident, current: dict) -> dict:
        """The first DELETE makes the namespace Terminating (the namespace controller then
        empties it and removes its `kubernetes` finalizer); a later one is refused while
        spec.finalizers remain."""
        meta = current["metadata"]
        if not meta.get("deletionTimestamp"):
            meta["deletionTimestamp"] = now_rfc3339()
            current.setdefault("status", {})["phase"] = "Terminating"
            self._bump(current)
            self._record("MODIFIED", rt, current)
            return clone(current)
        if (current.get("spec") or {}).get("finalizers"):
            raise errors.ApiError(
                409, "Conflict",
                f'Operation cannot be fulfilled on namespaces "{meta["name"]}": The system is ensuring all content '
                "is removed from this namespace.  Upon completion, this namespace will automatically be purged by "
                "the system.", {"name": meta["name"], "kind": "namespaces"})
        if meta.get("finalizers"):
            return clone(current)
        return self._remove(rt, ident, current)

    def _collect(self, owner: dict) -> None:
        """The garbage collector once an owner is gone: its dependents without another live
        owner are deleted (Background, or as their own GC finalizers say), and an owner in
        foreground deletion that waited for this object is finished if nothing else blocks it."""
        uid = owner["metadata"]["uid"]
        for rt, ns, name, obj in self._dependents(uid):
            others = [r.get("uid") for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
            if any(self._by_uid(o) is not None for o in others):
                continue  # another owner is solid: it stays
            try:
                self.delete(rt, ns, name)
            except errors.ApiError:
                pass
        for ref in owner["metadata"].get("ownerReferences") or []:
            found = self._by_uid(ref.get("uid"))
            if found is not None:
                self._collect_deleting(found[0], self._ident(found[0], *found[1:3]))

    def _dependents(self, uid: str) -> list[tuple]:
        return [(self.types[key], ns, name, obj) for key, bucket in list(self._objects.items())
                for (ns, name), obj in list(bucket.items())
                if any(r.get("uid") == uid for r in obj["metadata"].get("ownerReferences") or [])]

    def _by_uid(self, uid) -> tuple | None:
        """(type, namespace, name, object) of the stored object with that uid."""
        for key, bucket in self._objects.items():
            for (ns, name), obj in bucket.items():
                if obj["metadata"].get("uid") == uid:
                    return self.types[key], ns, name, obj
        return None

    def _collect_deleting(self, rt, ident) -> None:
        """The garbage collector's part for an owner being deleted with its GC finalizers
        (kube-controller-manager v1.31 garbagecollector.go): `orphan` - every dependent loses
        its ownerReference to it, then the finalizer goes; `foregroundDeletion` - dependents
        that block owner deletion are deleted (in the foreground themselves when they own
        others), and the finalizer goes once none of them is left."""
        obj = self._bucket(rt).get(ident)
        if obj is None or not obj["metadata"].get("deletionTimestamp"):
            return
        meta, uid = obj["metadata"], obj["metadata"]["uid"]
        finalizers = meta.get("finalizers") or []
        if ORPHAN_FINALIZER in finalizers:
            for dep_rt, ns, name, _dep in self._dependents(uid):
                self.mutate(dep_rt, ns, name, lambda o: _drop_owner(o, uid))
            self._drop_finalizer(rt, ident, ORPHAN_FINALIZER)
        elif FOREGROUND_FINALIZER in finalizers:
            blocking = [(dep_rt, ns, name, dep) for dep_rt, ns, name, dep in self._dependents(uid)
                        if any(r.get("uid") == uid and r.get("blockOwnerDeletion") for r in dep["metadata"]["ownerReferences"])]
            for dep_rt, ns, name, dep in blocking:
                if dep["metadata"].get("deletionTimestamp"):
                    continue
                owns = bool(self._dependents(dep["metadata"]["uid"]))
                try:
                    self.delete(dep_rt, ns, name, propagation="Foreground" if owns else None)
                except errors.ApiError:
                    pass
            still = [d for d in blocking if self._bucket(d[0]).get(self._ident(d[0], d[1], d[2])) is not None]
            if not still:
                self._drop_finalizer(rt, ident, FOREGROUND_FINALIZER)

    def _drop_finalizer(self, rt, ident, finalizer: str) -> None:
        obj = self._bucket(rt).get(ident)
        if obj is not None and finalizer in (obj["metadata"].get("finalizers") or []):
            self.mutate(rt, ident[0], ident[1], lambda o: o["metadata"].__setitem__(
                "finalizers", [f for f in o["metadata"]["finalizers"] if f != finalizer]))

    # --- watching --------------------------------------------------------------
    def wait_for_change(self, since_rv: int, timeout: float) -> int:
        """Block until the resourceVersion moves past `since_rv` or timeout; return it."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while self.rv <= since_rv:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.changed.wait(left)
            return self.rv

    def events_since(self, rv: int, key=None, namespace=None) -> list[Event]:
        with self.lock:
            return [e for e in self.events if e.rv > rv and (key is None or e.key == key)
                    and (namespace is None or e.namespace == namespace)]


ORPHAN_FINALIZER, FOREGROUND_FINALIZER = "orphan", "foregroundDeletion"


def gc_finalizers(finalizers: list[str], propagation: str | None) -> list[str]:
    """deletionFinalizersForGarbageCollection (registry/generic/registry/store.go, v1.31): an
    explicit policy decides; without one the object's own GC finalizer stays; Background
    (every type served here defaults to DeleteDependents) adds none."""
    orphan = propagation == "Orphan" if propagation else ORPHAN_FINALIZER in finalizers
    foreground = propagation == "Foreground" if propagation else (
        FOREGROUND_FINALIZER in finalizers and not orphan)
    kept = [f for f in finalizers if f not in (ORPHAN_FINALIZER, FOREGROUND_FINALIZER)]
    new = kept + ([ORPHAN_FINALIZER] if orphan else []) + ([FOREGROUND_FINALIZER] if foreground else [])
    return finalizers if sorted(new) == sorted(finalizers) else new


def _etcd_order(item) -> str:
    """etcd's order of keys: /registry/<resource>/[<namespace>/]<name>, compared as strings."""
    (ns, name), _ = item
    return f"{ns}/{name}" if ns is not None else name


def _drop_owner(obj: dict, uid: str) -> None:
    refs = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
    if refs:
        obj["metadata"]["ownerReferences"] = refs
    else:
        obj["metadata"].pop("ownerReferences", None)


def _check_preconditions(rt, current: dict, pre: dict) -> None:
    meta, name = current["metadata"], current["metadata"]["name"]
    what = f"{rt.plural}.{rt.group}" if rt.group else rt.plural
    if pre.get("uid") and pre["uid"] != meta["uid"]:
        raise errors.ApiError(409, "Conflict", f'Operation cannot be fulfilled on {what} "{name}": the UID in the '
                              f"precondition ({pre['uid']}) does not match the UID in record ({meta['uid']}). "
                              "The object might have been deleted and then recreated", {"name": name, "kind": rt.plural})
    if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
        raise errors.ApiError(409, "Conflict", f'Operation cannot be fulfilled on {what} "{name}": the ResourceVersion '
                              f"in the precondition ({pre['resourceVersion']}) does not match the ResourceVersion in "
                              f"record ({meta['resourceVersion']}). The object might have been modified",
                              {"name": name, "kind": rt.plural})


def _delete_during_update(rt, old: dict, new: dict) -> bool:
    """shouldDeleteDuringUpdate: the last finalizer of an object being deleted (grace 0) was
    removed. A namespace goes once both its finalizers and spec.finalizers are empty."""
    om, nm = old["metadata"], new["metadata"]
    if not om.get("deletionTimestamp") or nm.get("finalizers"):
        return False
    if rt.key == NAMESPACES:
        return not (new.get("spec") or {}).get("finalizers")
    return bool(om.get("finalizers")) and not om.get("deletionGracePeriodSeconds")


def _spec_of(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}
