"""Level-triggered controller loop and helpers shared by the simulated controllers."""

from __future__ import annotations

import logging
import threading

from ..apiserver.store import Store, now_rfc3339

log = logging.getLogger("sandbox")


class Controller:
    """Reconciles everything whenever the store changes, and at least every `resync` s.

    Watch-driven as controller-runtime's controllers are: a pass starts as soon as the store
    changes (its own writes included, so multi-step work proceeds at once), with no polling
    interval on that path. Only a burst of passes that each found a new change waiting
    (BURST back to back) is spaced by SPACING s, so that a storm of writes coalesces rather
    than spins.

    Followers (`follow`) run in the leader's thread, right after each of its passes, in order:
    what the leader does with a change is done before any follower sees it (KubeRay's RayJob
    controller after Kueue, kueue.py says why)."""

    name = "controller"
    resync = 0.5
    BURST, SPACING = 3, 0.02

    def __init__(self, store: Store, registry):
        self.store, self.registry = store, registry
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.followers: list[Controller] = []
        self._leader: Controller | None = None

    def rt(self, group: str, plural: str):
        return self.registry.get(group, plural)

    def follow(self, leader: Controller) -> None:
        """Run after `leader`'s every pass, in its thread, instead of in a thread of one's own."""
        leader.followers.append(self)
        self._leader = leader

    def start(self) -> None:
        if self._leader is not None:
            return  # runs in its leader's thread
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=30)

    def run_pass(self) -> None:
        """One pass of this controller, then of each follower."""
        for c in (self, *self.followers):
            try:
                c.reconcile()
            except Exception:  # a controller never dies of one bad object
                log.exception("%s: reconcile failed", c.name)

    def _run(self) -> None:
        burst = 0
        while not self._stop.is_set():
            before = self.store.rv
            self.run_pass()
            resync = min(c.resync for c in (self, *self.followers))
            if self.store.rv > before:  # changed during the pass: go again now, unless it keeps on
                burst += 1
                if burst >= self.BURST:
                    burst = 0
                    self._stop.wait(self.SPACING)
                continue
            burst = 0
            self.store.wait_for_change(before, resync)

    def reconcile(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


def set_condition(conditions: list, type_: str, status: str, reason: str, message: str,
                  generation: int | None = None) -> list:
    """Upsert a metav1.Condition; lastTransitionTime moves only when status changes."""
    out = [c for c in conditions or [] if c.get("type") != type_]
    old = next((c for c in conditions or [] if c.get("type") == type_), None)
    cond = {"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": old["lastTransitionTime"] if old and old.get("status") == status else now_rfc3339()}
    if generation is not None:
        cond["observedGeneration"] = generation
    out.append(cond)
    return out


def owner_ref(obj: dict, controller: bool = True) -> dict:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": controller, "blockOwnerDeletion": True}


def record_event(store: Store, registry, involved: dict, type_: str, reason: str, message: str,
                 component: str) -> None:
    """Write a core/v1 Event about `involved`, counting repeats like the event recorder (one
    Event per involved object, reason and message: a kubelet's "Failed to pull image" and
    "Error: ErrImagePull" are two Events, each counted)."""
    import hashlib

    rt = registry.get("", "events")
    ns = involved["metadata"].get("namespace") or "default"
    digest = hashlib.sha256(f"{reason}\0{message}".encode()).hexdigest()[:16]
    name = f"{involved['metadata']['name']}.{digest}"
    existing = store.find(rt, ns, name)
    if existing and existing.get("message") == message:
        existing["count"] = existing.get("count", 1) + 1
        existing["lastTimestamp"] = now_rfc3339()
        store.update(rt, existing, check_rv=False)
        return
    event = {
        "metadata": {"name": name, "namespace": ns},
        "involvedObject": {"apiVersion": involved["apiVersion"], "kind": involved["kind"],
                           "name": involved["metadata"]["name"], "namespace": ns,
                           "uid": involved["metadata"]["uid"]},
        "type": type_, "reason": reason, "message": message, "count": 1,
        "source": {"component": component}, "reportingComponent": component,
        "firstTimestamp": now_rfc3339(), "lastTimestamp": now_rfc3339(),
    }
    if existing:
        store.delete(rt, ns, name)
    store.create(rt, event)
