"""Fault injection, switched at run time through the sandbox control API.

API faults apply to every request whose path matches (errors and resets count down):
  {"api": {"errors": {"code": 503, "count": 3, "path": "rayclusters"},
           "resets": {"count": 2, "path": "..."}, "latency_ms": 200}}
Cluster faults apply to RayClusters whose name matches a glob ("*" for all):
  {"clusters": {"demo-*": {"never_admit": true, "image_pull": true, "taint": true,
                           "slow_start": 20, "head_crash_after": 5, "exceed_quota": true,
                           "image_pull_failures": 2, "crash_loop": true}}}
`image_pull` is true (the Ray container, containers[0]) or a container name ("oauth-proxy":
that container only): every pull of its image fails (the registry has no such manifest).
`image_pull_failures: N`: the Ray container's first N pulls fail as a registry outage does,
then it pulls. `crash_loop`: the head's Ray container exits at start (`ray start` refuses a
bad rayStartParams value, exit code 2), every time (true) or its first N starts; the kubelet restarts it with
its back-off (CrashLoopBackOff). `exceed_quota` makes the apiserver refuse the cluster's pod creates as a
namespace ResourceQuota would (403 "exceeded quota: ..."; a string names the quota).
Platform timings (seconds; PLATFORM_DEFAULTS when unset) are what RHOAI's controllers take:
  {"platform": {"pods_ready_timeout_s": 300, "requeue_backoff_base_s": 60,
                "finalizer_delay_s": 2.0, "termination_grace_s": 30, "kubelet_backoff_s": 10}}
  pods_ready_timeout_s / requeue_backoff_base_s: Kueue's waitForPodsReady timeout and requeuing
  backoff base; finalizer_delay_s: how long the CodeFlare operator (RayCluster) and Kueue
  (Workload) take to drop their finalizers; termination_grace_s: a pod's default grace period;
  kubelet_backoff_s: the kubelet's back-off base for container restarts and image pulls
  (kubernetes v1.31 pkg/kubelet backOffPeriod 10 s, doubling up to MaxContainerBackOff 300 s,
  i.e. 30 x the base), also its pod worker's resync after a failed sync (jittered x1-1.5).
"""

from __future__ import annotations

import copy
import fnmatch
import re
import threading

CLUSTER_FAULTS = ("never_admit", "image_pull", "taint", "slow_start", "head_crash_after", "exceed_quota",
                  "image_pull_failures", "crash_loop")
# RHOAI's values: Kueue v0.11 defaults (apis/config/v1beta1/defaults.go: PodsReady timeout 5 min,
# backoff base 60 s) under opendatahub's `waitForPodsReady: {enable: true}`; kube's 30 s grace.
PLATFORM_DEFAULTS = {"pods_ready_timeout_s": 300.0, "requeue_backoff_base_s": 60.0,
                     "finalizer_delay_s": 2.0, "termination_grace_s": 30.0, "kubelet_backoff_s": 10.0}
SECTIONS = ("api", "clusters", "platform")


class Faults:
    def __init__(self):
        self._lock = threading.Lock()
        self._config: dict = {"api": {}, "clusters": {}, "platform": {}}

    def set(self, config: dict) -> dict:
        config = copy.deepcopy(config or {})
        unknown = [k for k in config if k not in SECTIONS]
        for pattern, faults in (config.get("clusters") or {}).items():
            unknown += [f"clusters.{pattern}.{k}" for k in faults if k not in CLUSTER_FAULTS]
            if not isinstance(faults.get("image_pull", False), (bool, str)):
                raise ValueError(f"clusters.{pattern}.image_pull must be true/false or a container name")
            for key in ("image_pull_failures", "crash_loop"):
                value = faults.get(key, 0)
                if not isinstance(value, (bool, int)) or (not isinstance(value, bool) and value < 0):
                    raise ValueError(f"clusters.{pattern}.{key} must be true/false or a count >= 0")
        platform = config.get("platform") or {}
        unknown += [f"platform.{k}" for k in platform if k not in PLATFORM_DEFAULTS]
        if unknown:
            raise ValueError(f"unknown fault(s): {', '.join(unknown)}; known cluster faults: {', '.join(CLUSTER_FAULTS)}; "
                             f"known platform settings: {', '.join(PLATFORM_DEFAULTS)}")
        for key, value in platform.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"platform.{key} must be a number of seconds >= 0, got {value!r}")
        with self._lock:
            self._config = {"api": config.get("api") or {}, "clusters": config.get("clusters") or {},
                            "platform": platform}
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

    # --- cluster faults --------------------------------------------------------
    def for_cluster(self, name: str) -> dict:
        with self._lock:
            out: dict = {}
            for pattern, faults in self._config["clusters"].items():
                if fnmatch.fnmatchcase(name, pattern):
                    out.update(faults)
            return out

    # --- platform timings ------------------------------------------------------
    def platform(self, key: str) -> float:
        """A platform timing in seconds: the value set under "platform", else RHOAI's default."""
        if key not in PLATFORM_DEFAULTS:
            raise KeyError(f"unknown platform setting {key!r}; known: {', '.join(PLATFORM_DEFAULTS)}")
        with self._lock:
            return float(self._config["platform"].get(key, PLATFORM_DEFAULTS[key]))
