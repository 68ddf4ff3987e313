"""Fault injection, switched at run time through the sandbox control API.

API faults apply to every request whose path matches (errors and resets count down):
  {"api": {"errors": {"code": 503, "count": 3, "path": "rayclusters"},
           "resets": {"count": 2, "path": "..."}, "latency_ms": 200,
           "missing_groups": ["ray.io"]}}
  (missing_groups: those API groups are not served, as on a cluster without the component)
Cluster faults apply to RayClusters whose name matches a glob ("*" for all):
  {"clusters": {"demo-*": {"never_admit": true, "image_pull": true, "taint": true,
                           "slow_start": 20, "head_crash_after": 5, "exceed_quota": true,
                           "image_pull_failures": 2, "crash_loop": true,
                           "dashboard_outage": {"mode": "hang", "after_s": 10, "for_s": 30},
                           "api_errors": [{"code": 503, "count": 3, "verbs": ["create"]}],
                           "api_resets": {"count": 2}, "api_latency_ms": 500}}}
  ("api_latency_ms": {"ms": 500, "verbs": ["create"]} delays only those verbs; with "after": true the
  request is carried out at once and its answer delayed: a create done whose answer is in flight)
`dashboard_outage` makes the head Service's dashboard port (8265) unreachable in the kube-proxy
(sandbox/proxy.py) while the Ray processes keep running: "refuse" (connection refused, open
connections reset) or "hang" (connections accepted and never answered, open ones stalled), from
`after_s` seconds after the head is ready (or after the fault is set, if later) for `for_s`
seconds (absent: until cleared). `api_errors`/`api_resets`/`api_latency_ms` are the API faults
below, for the requests on that RayCluster object only (get, create of that name, patch, update,
delete; `verbs` narrows them), so concurrent tests can each fault their own cluster.
`image_pull` is true (the Ray container, containers[0]) or a container name ("oauth-proxy":
that container only): every pull of its image fails (the registry has no such manifest).
`image_pull_failures: N`: the Ray container's first N pulls fail as a registry outage does,
then it pulls. `image_pull_s: N`: a pull this cluster's pod starts on a node without the image (a cold
node) takes N seconds, whatever the image's size (`image_pull_s_per_gib` below, for every pull);
`{"gpu-*": N}`: only on the nodes whose name matches. `crash_loop`: the head's Ray container exits at start (`ray start` refuses a
bad rayStartParams value, exit code 2), every time (true) or its first N starts; the kubelet restarts it with
its back-off (CrashLoopBackOff). `exceed_quota` makes the apiserver refuse the cluster's pod creates as a
namespace ResourceQuota would (403 "exceeded quota: ..."; a string names the quota).
S3 faults apply to the requests whose bucket/key path matches a glob:
  {"s3": {"hold": ["kfp-ray/run/*/checkpoints/epoch-0001.pt"]}}
  `hold`: such a request is held, unanswered, until no glob of the list matches it any more (a
  patch or clear of the faults), then answered 503 SlowDown and never stored: a write a test
  needs not to happen yet (a job that must not finish before the test has preempted it) waits
  there, and one whose writer has died meanwhile never lands. (A client that retries a 503, as
  boto3 does, writes it once released.)
Platform timings (seconds; PLATFORM_DEFAULTS when unset) are what RHOAI's controllers take:
  {"platform": {"pods_ready_timeout_s": 300, "requeue_backoff_base_s": 60,
                "finalizer_delay_s": 2.0, "termination_grace_s": 30, "kubelet_backoff_s": 10}}
  pods_ready_timeout_s / requeue_backoff_base_s: Kueue's waitForPodsReady timeout and requeuing
  backoff base; finalizer_delay_s: how long the CodeFlare operator (RayCluster) and Kueue
  (Workload) take to drop their finalizers; termination_grace_s: a pod's default grace period;
  image_pull_s_per_gib: how long a node without an image takes to pull each GiB of it (0, the
  default: every node has every image, as if pre-pulled; a real cold node takes minutes for the
  CUDA Ray image, see kubelet.image_size);
  task_retry_backoff_cap_s: the longest the pipelines server waits before retrying a failed
  task (unset: the retryPolicy's own backoff, as KFP's Argo compiler sets it);
  kubelet_backoff_s: the kubelet's back-off base for container restarts and image pulls
  (kubernetes v1.31 pkg/kubelet backOffPeriod 10 s, doubling up to MaxContainerBackOff 300 s,
  i.e. 30 x the base), also its pod worker's resync after a failed sync (jittered x1-1.5).
Platform switches (true/false; unset: what the sandbox's platform profile ships):
  {"platform": {"wait_for_pods_ready": true}}
  wait_for_pods_ready: Kueue's waitForPodsReady, as an administrator turns it on for the Red Hat
  build of Kueue (Kueue CR `gangScheduling.policy: ByWorkload`; off by default on RHOAI 3.x)
  or it ships on 2.x (on).
"""

from __future__ import annotations

import copy
import fnmatch
import json
import os
import re
import threading

CLUSTER_FAULTS = ("never_admit", "image_pull", "taint", "slow_start", "head_crash_after", "exceed_quota",
                  "image_pull_failures", "crash_loop", "dashboard_outage", "api_errors", "api_resets", "api_latency_ms", "image_pull_s")
OUTAGE_MODES = ("refuse", "hang")
ERROR_CODES = (429, 500, 503)
OBJECT_VERBS = ("get", "create", "patch", "update", "delete")
# RHOAI's values: Kueue v0.11 defaults (apis/config/v1beta1/defaults.go: PodsReady timeout 5 min,
# backoff base 60 s) under opendatahub's `waitForPodsReady: {enable: true}`; kube's 30 s grace.
PLATFORM_DEFAULTS = {"pods_ready_timeout_s": 300.0, "requeue_backoff_base_s": 60.0,
                     "finalizer_delay_s": 2.0, "termination_grace_s": 30.0, "kubelet_backoff_s": 10.0,
                     "task_retry_backoff_cap_s": float("inf"), "image_pull_s_per_gib": 0.0}
# A sandbox started with this set (JSON, the "platform" section) starts with those settings:
# how a test shortens a timing in a sandbox another process starts (`kfp-ray run --local`).
PLATFORM_ENV = "KFP_RAY_SANDBOX_PLATFORM"
PLATFORM_SWITCHES = ("wait_for_pods_ready",)
SECTIONS = ("api", "clusters", "platform", "s3")


class Faults:
    def __init__(self):
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # an S3 request held until the faults change
        self._config: dict = {"api": {}, "clusters": {}, "platform": {}, "s3": {}}
        self.s3_holding: list[str] = []  # the paths of the S3 requests held now
        if os.environ.get(PLATFORM_ENV):
            self.set({"platform": json.loads(os.environ[PLATFORM_ENV])})

    @staticmethod
    def _validated(config: dict) -> dict:
        config = copy.deepcopy(config or {})
        unknown = [k for k in config if k not in SECTIONS]
        for pattern, faults in (config.get("clusters") or {}).items():
            unknown += [f"clusters.{pattern}.{k}" for k in faults if k not in CLUSTER_FAULTS]
            if not isinstance(faults.get("image_pull", False), (bool, str)):
                raise ValueError(f"clusters.{pattern}.image_pull must be true/false or a container name")
            _check_cluster_faults(pattern, faults)
            for key in ("image_pull_failures", "crash_loop"):
                value = faults.get(key, 0)
                if not isinstance(value, (bool, int)) or (not isinstance(value, bool) and value < 0):
                    raise ValueError(f"clusters.{pattern}.{key} must be true/false or a count >= 0")
        platform = config.get("platform") or {}
        unknown += [f"platform.{k}" for k in platform if k not in PLATFORM_DEFAULTS and k not in PLATFORM_SWITCHES]
        if unknown:
            raise ValueError(f"unknown fault(s): {', '.join(unknown)}; known cluster faults: {', '.join(CLUSTER_FAULTS)}; "
                             f"known platform settings: {', '.join([*PLATFORM_DEFAULTS, *PLATFORM_SWITCHES])}")
        for key, value in platform.items():
            if key in PLATFORM_SWITCHES:
                if not isinstance(value, bool):
                    raise ValueError(f"platform.{key} must be true or false, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"platform.{key} must be a number of seconds >= 0, got {value!r}")
        s3 = config.get("s3") or {}
        unknown_s3 = [f"s3.{k}" for k in s3 if k != "hold"]
        if unknown_s3 or not all(isinstance(g, str) for g in s3.get("hold", [])):
            raise ValueError(f"s3 faults take only hold, a list of bucket/key globs; got {s3!r}")
        return {"api": config.get("api") or {}, "clusters": config.get("clusters") or {}, "platform": platform,
                "s3": s3}

    def set(self, config: dict) -> dict:
        config = self._validated(config)
        with self._lock:
            self._config = config
            self._changed.notify_all()
            return copy.deepcopy(self._config)

    def patch(self, doc: dict) -> dict:
        """Apply a JSON merge patch (RFC 7386: objects merge, null removes a key, anything else
        replaces) atomically, so that tests can each set and clear their own cluster's faults
        without rewriting the others' (API fault counts keep counting down)."""
        if not isinstance(doc, dict):
            raise ValueError("a faults patch must be a JSON object")
        with self._lock:
            self._config = self._validated(_merge_patch(self._config, doc))
            self._changed.notify_all()
            return copy.deepcopy(self._config)

    def get(self) -> dict:
        with self._lock:
            return copy.deepcopy(self._config)

    def clear(self) -> None:
        self.set({})

    # --- API faults ------------------------------------------------------------
    def _take(self, kind: str, path: str) -> dict | None:
        with self._lock:
            spec = self._config["api"].get(kind)
            if not spec or spec.get("count", 0) <= 0:
                return None
            if spec.get("path") and not re.search(spec["path"], path):
                return None
            spec["count"] -= 1
            return dict(spec)

    def missing_group(self, group: str) -> bool:
        """`{"api": {"missing_groups": ["ray.io"]}}`: the API group is not served (discovery
        leaves it out, its paths answer 404), as on a cluster without that component."""
        with self._lock:
            return group in (self._config["api"].get("missing_groups") or [])

    def take_error(self, path: str) -> dict | None:
        return self._take("errors", path)

    def take_reset(self, path: str) -> bool:
        return self._take("resets", path) is not None

    def latency(self, path: str) -> float:
        with self._lock:
            api = self._config["api"]
            if api.get("latency_path") and not re.search(api["latency_path"], path):
                return 0.0
            return float(api.get("latency_ms", 0)) / 1000.0

    # --- S3 faults -------------------------------------------------------------
    def _s3_held(self, path: str) -> bool:
        return any(fnmatch.fnmatchcase(path, glob) for glob in self._config["s3"].get("hold", []))

    def hold_s3(self, path: str, stopping: threading.Event) -> bool:
        """Hold an S3 request for `path` (bucket/key) while a hold glob matches it (or until the
        server stops); True when it was held (its answer is then 503, and it is not carried out)."""
        with self._lock:
            if not self._s3_held(path):
                return False
            self.s3_holding.append(path)
            try:
                while self._s3_held(path) and not stopping.is_set():
                    self._changed.wait(timeout=1.0)  # a change notifies; the timeout only sees `stopping`
            finally:
                self.s3_holding.remove(path)
            return True

    def s3_held(self) -> list[str]:
        with self._lock:
            return list(self.s3_holding)

    # --- cluster faults --------------------------------------------------------
    def for_cluster(self, name: str) -> dict:
        with self._lock:
            out: dict = {}
            for pattern, faults in self._config["clusters"].items():
                if fnmatch.fnmatchcase(name, pattern):
                    out.update(faults)
            return out

    # --- API faults on one RayCluster ---------------------------------------------
    def _take_cluster(self, kind: str, name: str, verb: str) -> dict | None:
        with self._lock:
            for pattern, faults in self._config["clusters"].items():
                if not fnmatch.fnmatchcase(name, pattern):
                    continue
                specs = faults.get(kind) or []
                for spec in [specs] if isinstance(specs, dict) else specs:
                    if spec.get("count", 0) > 0 and verb in (spec.get("verbs") or OBJECT_VERBS):
                        spec["count"] -= 1
                        return dict(spec)
        return None

    def take_cluster_error(self, name: str, verb: str) -> dict | None:
        """An injected error for this request on RayCluster `name`, if one is due."""
        return self._take_cluster("api_errors", name, verb)

    def take_cluster_reset(self, name: str, verb: str) -> bool:
        return self._take_cluster("api_resets", name, verb) is not None

    def cluster_latency(self, name: str, verb: str, answer: bool = False) -> float:
        """Seconds to delay this request on RayCluster `name` before it is carried out, or with
        answer=True after it is carried out, before its answer ({"after": true}: a create that
        is done but whose answer has not arrived yet)."""
        latency = self.for_cluster(name).get("api_latency_ms", 0)
        after = False
        if isinstance(latency, dict):
            if verb not in (latency.get("verbs") or OBJECT_VERBS):
                return 0.0
            latency, after = latency.get("ms", 0), bool(latency.get("after"))
        return float(latency) / 1000.0 if after == answer else 0.0

    # --- platform timings ------------------------------------------------------
    def platform(self, key: str) -> float:
        """A platform timing in seconds: the value set under "platform", else RHOAI's default."""
        if key not in PLATFORM_DEFAULTS:
            raise KeyError(f"unknown platform setting {key!r}; known: {', '.join(PLATFORM_DEFAULTS)}")
        with self._lock:
            return float(self._config["platform"].get(key, PLATFORM_DEFAULTS[key]))

    def switch(self, key: str, default: bool) -> bool:
        """A platform switch: the value set under "platform", else `default` (the profile's)."""
        if key not in PLATFORM_SWITCHES:
            raise KeyError(f"unknown platform switch {key!r}; known: {', '.join(PLATFORM_SWITCHES)}")
        with self._lock:
            return bool(self._config["platform"].get(key, default))


def _merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge_patch(out.get(key), value)
    return out


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_cluster_faults(pattern: str, faults: dict) -> None:
    where = f"clusters.{pattern}"
    pull_s = faults.get("image_pull_s")
    if pull_s is not None and not all(_number(v) and v >= 0 for v in (pull_s.values() if isinstance(pull_s, dict) else [pull_s])):
        raise ValueError(f"{where}.image_pull_s must be seconds >= 0, or {{\"<node glob>\": seconds}}, got {pull_s!r}")
    outage = faults.get("dashboard_outage")
    if outage is not None:
        if not isinstance(outage, dict) or outage.get("mode") not in OUTAGE_MODES:
            raise ValueError(f"{where}.dashboard_outage must be {{\"mode\": \"refuse\"|\"hang\", \"after_s\": s, \"for_s\": s}}")
        extra = set(outage) - {"mode", "after_s", "for_s"}
        if extra:
            raise ValueError(f"{where}.dashboard_outage: unknown key(s) {', '.join(sorted(extra))}; known: mode, after_s, for_s")
        for key in ("after_s", "for_s"):
            if key in outage and (not _number(outage[key]) or outage[key] < 0):
                raise ValueError(f"{where}.dashboard_outage.{key} must be a number of seconds >= 0, got {outage[key]!r}")
    for kind in ("api_errors", "api_resets"):
        specs = faults.get(kind)
        if specs is None:
            continue
        for spec in [specs] if isinstance(specs, dict) else specs if isinstance(specs, list) else [None]:
            if not isinstance(spec, dict) or not isinstance(spec.get("count"), int) or spec["count"] < 0:
                raise ValueError(f"{where}.{kind} must be {{\"count\": n, ...}} or a list of them")
            if kind == "api_errors" and spec.get("code", 503) not in ERROR_CODES:
                raise ValueError(f"{where}.api_errors code must be one of {ERROR_CODES}, got {spec.get('code')!r}")
            bad = [v for v in spec.get("verbs") or [] if v not in OBJECT_VERBS]
            if bad:
                raise ValueError(f"{where}.{kind} verbs {bad} unknown; known: {', '.join(OBJECT_VERBS)}")
    latency = faults.get("api_latency_ms")
    if isinstance(latency, dict):
        bad = [v for v in latency.get("verbs") or [] if v not in OBJECT_VERBS]
        if bad or set(latency) - {"ms", "verbs", "after"}:
            raise ValueError(f"{where}.api_latency_ms must be a number or {{\"ms\": n, \"verbs\": [...], \"after\": bool}} "
                             f"(verbs: {', '.join(OBJECT_VERBS)})")
        latency = latency.get("ms", 0)
    if latency is not None and (not _number(latency) or latency < 0):
        raise ValueError(f"{where}.api_latency_ms must be a number >= 0, got {latency!r}")
