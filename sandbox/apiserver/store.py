"""The object store behind the API server: etcd plus the apiserver's object bookkeeping.

uid, resourceVersion (one counter for all objects), generation (bumped on spec changes),
creationTimestamp, generateName, finalizers with deletionTimestamp, garbage collection
through ownerReferences, and an event log that watches and controllers read.
"""

from __future__ import annotations

import copy
import random
import threading
import time
import uuid
from collections import deque
from datetime import UTC, datetime

from . import errors

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def random_suffix(n: int = 5) -> str:
    return "".join(random.choice(_NAME_CHARS) for _ in range(n))


class Event:
    __slots__ = ("rv", "type", "key", "namespace", "obj")

    def __init__(self, rv, type_, key, namespace, obj):
        self.rv, self.type, self.key, self.namespace, self.obj = rv, type_, key, namespace, obj


class Store:
    def __init__(self, history: int = 20000):
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.rv = 0
        self._objects: dict[tuple, dict[tuple, dict]] = {}
        self.events: deque[Event] = deque(maxlen=history)
        self.types: dict[tuple, object] = {}

    # --- helpers ---------------------------------------------------------------
    def _bucket(self, rt) -> dict:
        self.types[rt.key] = rt
        return self._objects.setdefault(rt.key, {})

    def _ident(self, rt, namespace, name):
        return (namespace if rt.namespaced else None, name)

    def _record(self, type_, rt, obj):
        self.events.append(Event(self.rv, type_, rt.key, obj["metadata"].get("namespace"), copy.deepcopy(obj)))
        self.changed.notify_all()

    def _bump(self, obj):
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)

    # --- reads -----------------------------------------------------------------
    def get(self, rt, namespace, name) -> dict:
        with self.lock:
            obj = self._bucket(rt).get(self._ident(rt, namespace, name))
            if obj is None:
                raise errors.not_found(rt, name)
            return copy.deepcopy(obj)

    def find(self, rt, namespace, name) -> dict | None:
        with self.lock:
            obj = self._bucket(rt).get(self._ident(rt, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, rt, namespace=None, match=None) -> tuple[list[dict], str]:
        with self.lock:
            items = [copy.deepcopy(o) for (ns, _), o in sorted(self._bucket(rt).items(), key=lambda kv: (kv[0][0] or "", kv[0][1]))
                     if (namespace is None or ns == namespace) and (match is None or match(o))]
            return items, str(self.rv)

    # --- writes ----------------------------------------------------------------
    def create(self, rt, obj: dict, dry_run: bool = False) -> dict:
        """Store a new object; dry_run: every check and the bookkeeping, nothing stored."""
        with self.lock:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + random_suffix()
            bucket = self._bucket(rt)
            ident = self._ident(rt, meta.get("namespace"), meta["name"])
            if ident in bucket:
                raise errors.already_exists(rt, meta["name"])
            obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            meta["generation"] = 1
            for k in ("resourceVersion", "deletionTimestamp", "selfLink"):
                meta.pop(k, None)
            if dry_run:
                return obj
            self._bump(obj)
            bucket[ident] = obj
            self._record("ADDED", rt, obj)
            return copy.deepcopy(obj)

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
            new = copy.deepcopy(obj)
            if subresource == "status":
                merged = copy.deepcopy(current)
                merged["status"] = new.get("status")
                new = merged
            else:
                if "status" in rt.subresources:
                    if "status" in current:
                        new["status"] = copy.deepcopy(current["status"])
                    else:
                        new.pop("status", None)
                # Immutable bookkeeping comes from the stored object.
                for k in ("uid", "creationTimestamp", "generation", "deletionTimestamp", "namespace", "name"):
                    if k in current["metadata"]:
                        new["metadata"][k] = current["metadata"][k]
                    else:
                        new["metadata"].pop(k, None)
                if _spec_of(new) != _spec_of(current):
                    new["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
            new["apiVersion"], new["kind"] = rt.api_version, rt.kind
            if new == current:
                return copy.deepcopy(current)
            if dry_run:
                new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                return new
            self._bump(new)
            if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
                del bucket[ident]
                self._record("DELETED", rt, new)
                self._collect(new)
                return copy.deepcopy(new)
            bucket[ident] = new
            self._record("MODIFIED", rt, new)
            return copy.deepcopy(new)

    def mutate(self, rt, namespace, name, fn, subresource: str | None = None) -> dict | None:
        """Read-modify-write under the lock (for controllers). Returns None if gone."""
        with self.lock:
            current = self.find(rt, namespace, name)
            if current is None:
                return None
            fn(current)
            return self.update(rt, current, subresource=subresource, check_rv=False)

    def delete(self, rt, namespace, name, dry_run: bool = False) -> dict:
        with self.lock:
            bucket = self._bucket(rt)
            ident = self._ident(rt, namespace, name)
            current = bucket.get(ident)
            if current is None:
                raise errors.not_found(rt, name)
            if dry_run:  # what the answer would be: marked for deletion, or gone as it was
                out = copy.deepcopy(current)
                if out["metadata"].get("finalizers") and not out["metadata"].get("deletionTimestamp"):
                    out["metadata"]["deletionTimestamp"] = now_rfc3339()
                return out
            if current["metadata"].get("finalizers"):
                if not current["metadata"].get("deletionTimestamp"):
                    current["metadata"]["deletionTimestamp"] = now_rfc3339()
                    self._bump(current)
                    self._record("MODIFIED", rt, current)
                return copy.deepcopy(current)
            del bucket[ident]
            self._bump(current)
            self._record("DELETED", rt, current)
            self._collect(current)
            return copy.deepcopy(current)

    def _collect(self, owner: dict) -> None:
        """Background garbage collection: delete objects owned by a deleted one."""
        uid = owner["metadata"]["uid"]
        for key, bucket in list(self._objects.items()):
            rt = self.types[key]
            for (ns, name), obj in list(bucket.items()):
                refs = obj["metadata"].get("ownerReferences") or []
                if any(r.get("uid") == uid for r in refs):
                    try:
                        self.delete(rt, ns, name)
                    except errors.ApiError:
                        pass

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


def _spec_of(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}
