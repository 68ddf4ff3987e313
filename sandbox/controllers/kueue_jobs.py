"""Kueue's two Ray job integrations (kubernetes-sigs/kueue v0.11.6 pkg/controller/jobs/raycluster
and jobs/rayjob): what jobframework's generic reconciler and webhooks ask of each kind.

- RayClusterJob (jobs/raycluster/raycluster_controller.go): suspended = spec.suspend; active
  and PodsReady = status.state "ready"; never finished; pod sets head + worker groups.
- RayJobJob (jobs/rayjob/rayjob_controller.go): suspended = spec.suspend; active unless
  status.jobDeploymentStatus is Suspended or New (""); PodsReady = status.rayClusterStatus.state
  "ready"; Finished = jobDeploymentStatus Complete or Failed (success: jobStatus SUCCEEDED,
  message: status.message); pod sets head, worker groups and, in K8sJobMode, `submitter` (the
  RayJob's submitterPodTemplate or Kueue's copy of KubeRay's default submitter template).
- Workload names: jobframework/workload_names.go GetWorkloadNameForOwnerWithGVK.
- Starting and stopping (RunWithPodSetsInfo / RestorePodSetsInfo of both kinds): the pod set
  infos (kueue_podset.py) go into the head's and each worker group's template, a RayJob's in
  spec.rayClusterSpec and, in K8sJobMode, its spec.submitterPodTemplate (without one, Kueue's
  default submitter template is a fresh copy, so nothing is written); a count of infos other
  than the job's pod sets fails the start and skips the restore.
- Webhook validation (jobs/raycluster/raycluster_webhook.go vraycluster.kb.io,
  jobs/rayjob/rayjob_webhook.go vrayjob.kb.io, jobframework/validation.go
  validateUpdateForQueueName), with field.Error's message formats (apimachinery
  util/validation/field/errors.go ErrorBody).
"""

from __future__ import annotations

import hashlib
import json

from . import kueue_podset

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"  # constants.WorkloadPriorityClassLabel
HEAD = "head"
SUBMITTER = "submitter"
MAX_WORKER_GROUPS = 7


def queue_name(obj: dict) -> str:
    return (obj["metadata"].get("labels") or {}).get(QUEUE_LABEL, "")


def workload_name_for(kind: str, name: str, uid: str) -> str:
    """GetWorkloadNameForOwnerWithGVK: <kind>-<name> (at most 247) - sha1(kind, group, name, uid)[:5]."""
    digest = hashlib.sha1(f"{kind}\nray.io\n{name}\n{uid}".encode()).hexdigest()[:5]
    return f"{(kind.lower() + '-' + name)[:247]}-{digest}"


def cluster_pod_sets(spec: dict) -> list[dict]:
    """Head (1), then each worker group (replicas, 1 when unset, x numOfHosts when > 1)."""
    spec = spec or {}
    sets = [{"name": HEAD, "count": 1, "template": (spec.get("headGroupSpec") or {}).get("template") or {}}]
    for group in spec.get("workerGroupSpecs") or []:
        count = group["replicas"] if group.get("replicas") is not None else 1
        count *= group.get("numOfHosts") or 1
        sets.append({"name": group.get("groupName", ""), "count": int(count), "template": group.get("template") or {}})
    return sets


def default_submitter_template(cluster_spec: dict) -> dict:
    """jobs/rayjob getSubmitterTemplate's default (KubeRay's common.GetDefaultSubmitterTemplate):
    the head's image, requests 500m/200Mi, limits 1/1Gi, restartPolicy Never."""
    containers = (((cluster_spec or {}).get("headGroupSpec") or {}).get("template") or {}).get("spec", {}).get("containers") or [{}]
    return {"spec": {"containers": [{"name": "ray-job-submitter", "image": containers[0].get("image", ""),
                                     "resources": {"limits": {"cpu": "1", "memory": "1Gi"},
                                                   "requests": {"cpu": "500m", "memory": "200Mi"}}}],
                     "restartPolicy": "Never"}}


def submission_mode(rayjob: dict) -> str:
    return (rayjob.get("spec") or {}).get("submissionMode") or "K8sJobMode"


def _cluster_templates(spec: dict) -> list[dict]:
    """The head's template, then each worker group's (made where missing, as Go's zero values are)."""
    out = [spec.setdefault("headGroupSpec", {}).setdefault("template", {})]
    return out + [group.setdefault("template", {}) for group in spec.get("workerGroupSpecs") or []]


def _run(templates: list[dict], spec: dict, infos: list[dict]) -> None:
    if len(infos) != len(templates):
        raise kueue_podset.bad_len(len(templates), len(infos))
    spec["suspend"] = False
    for template, info in zip(templates, infos, strict=True):
        kueue_podset.merge(template, info)


def _restore(templates: list[dict], infos: list[dict]) -> bool:
    if len(infos) != len(templates):
        return False
    changed = False
    for template, info in zip(templates, infos, strict=True):
        changed = kueue_podset.restore(template, info) or changed
    return changed


class RayClusterJob:
    kind, plural, recorder = "RayCluster", "rayclusters", "ray.io/raycluster-kueue-controller"

    def __init__(self, obj: dict):
        self.obj = obj

    def suspended(self) -> bool:
        return bool((self.obj.get("spec") or {}).get("suspend"))

    def active(self) -> bool:
        return ((self.obj.get("status") or {}).get("state")) == "ready"

    def pods_ready(self) -> bool:
        return self.active()

    def finished(self) -> tuple[str, bool, bool]:
        return "", False, False

    def pod_sets(self) -> list[dict]:
        return cluster_pod_sets(self.obj.get("spec"))

    @staticmethod
    def run_with_pod_sets_info(obj: dict, infos: list[dict]) -> None:
        """Unsuspend `obj` (this kind, a dict) with the admission's pod set infos merged in."""
        spec = obj.setdefault("spec", {})
        _run(_cluster_templates(spec), spec, infos)

    @staticmethod
    def restore_pod_sets_info(obj: dict, infos: list[dict]) -> bool:
        return _restore(_cluster_templates(obj.setdefault("spec", {})), infos)


class RayJobJob:
    kind, plural, recorder = "RayJob", "rayjobs", "ray.io/rayjob-kueue-controller"

    def __init__(self, obj: dict):
        self.obj = obj

    def suspended(self) -> bool:
        return bool((self.obj.get("spec") or {}).get("suspend"))

    def active(self) -> bool:
        return (self.obj.get("status") or {}).get("jobDeploymentStatus", "") not in ("Suspended", "")

    def pods_ready(self) -> bool:
        return (((self.obj.get("status") or {}).get("rayClusterStatus") or {}).get("state")) == "ready"

    def finished(self) -> tuple[str, bool, bool]:
        status = self.obj.get("status") or {}
        return (status.get("message", ""), status.get("jobStatus") == "SUCCEEDED",
                status.get("jobDeploymentStatus") in ("Failed", "Complete"))

    def pod_sets(self) -> list[dict]:
        spec = self.obj.get("spec") or {}
        sets = cluster_pod_sets(spec.get("rayClusterSpec"))
        if submission_mode(self.obj) == "K8sJobMode":
            template = spec.get("submitterPodTemplate") or default_submitter_template(spec.get("rayClusterSpec"))
            sets.append({"name": SUBMITTER, "count": 1, "template": template})
        return sets

    @staticmethod
    def _templates(obj: dict) -> list[dict]:
        spec = obj.setdefault("spec", {})
        templates = _cluster_templates(spec.setdefault("rayClusterSpec", {}))
        if submission_mode(obj) == "K8sJobMode":  # getSubmitterTemplate: the job's own, else a copy
            templates.append(spec["submitterPodTemplate"] if spec.get("submitterPodTemplate")
                             else default_submitter_template(spec["rayClusterSpec"]))
        return templates

    @classmethod
    def run_with_pod_sets_info(cls, obj: dict, infos: list[dict]) -> None:
        _run(cls._templates(obj), obj["spec"], infos)

    @classmethod
    def restore_pod_sets_info(cls, obj: dict, infos: list[dict]) -> bool:
        return _restore(cls._templates(obj), infos)


JOB_KINDS = {"rayclusters": RayClusterJob, "rayjobs": RayJobJob}


# --- webhook validation (field.Error texts) --------------------------------------------
def _go_value(value) -> str:
    """How field.Invalid prints a bad value: bool/number plain, string quoted, else Go's %#v."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):  # map[string]string, keys sorted as fmt prints maps
        return "map[string]string{" + ", ".join(f"{json.dumps(k)}:{json.dumps(str(v))}"
                                                for k, v in sorted(value.items())) + "}"
    return str(value)


def validate_cluster_spec(spec: dict, path: str) -> list[str]:
    """The checks both webhooks make of a cluster spec: no in-tree autoscaling, at most 7 worker
    groups (8 pod sets less the head), no worker group named "head"."""
    spec = spec or {}
    errs = []
    if spec.get("enableInTreeAutoscaling"):
        errs.append(f"{path}.enableInTreeAutoscaling: Invalid value: true: a kueue managed job should not use autoscaling")
    groups = spec.get("workerGroupSpecs") or []
    if len(groups) > MAX_WORKER_GROUPS:
        errs.append(f"{path}.workerGroupSpecs: Too many: {len(groups)}: must have at most {MAX_WORKER_GROUPS} items")
    errs += [f'{path}.workerGroupSpecs[{i}].groupName: Forbidden: "{HEAD}" is reserved for the head group'
             for i, g in enumerate(groups) if g.get("groupName") == HEAD]
    return errs


def validate_rayjob(obj: dict) -> list[str]:
    """rayjob_webhook.go validateCreate for a RayJob with a queue name."""
    spec = obj.get("spec") or {}
    errs = []
    if not spec.get("shutdownAfterJobFinishes"):
        errs.append("spec.shutdownAfterJobFinishes: Invalid value: false: "
                    "a kueue managed job should delete the cluster after finishing")
    if spec.get("clusterSelector"):
        errs.append(f"spec.clusterSelector: Invalid value: {_go_value(spec['clusterSelector'])}: "
                    "a kueue managed job should not use an existing cluster")
    return errs + validate_cluster_spec(spec.get("rayClusterSpec"), "spec.rayClusterSpec")


def immutable_queue(op: str, obj: dict, old: dict | None) -> list[str]:
    """validateUpdateForQueueName: the queue name may change only while the job is suspended."""
    queue = queue_name(obj)
    if op == "UPDATE" and old is not None and not (obj.get("spec") or {}).get("suspend") and queue_name(old) != queue:
        return [f'metadata.labels[{QUEUE_LABEL}]: Invalid value: "{queue}": field is immutable']
    return []


def immutable_priority_class(op: str, obj: dict, old: dict | None, while_suspended: bool) -> list[str]:
    """ValidateUpdateForWorkloadPriorityClassName: the kueue.x-k8s.io/priority-class label is immutable
    (v0.11); from v0.12 (validateJobUpdateForWorkloadPriorityClassName) it may change while the job is
    suspended, to a non-empty name."""
    if op != "UPDATE" or old is None:
        return []
    new_name = (obj["metadata"].get("labels") or {}).get(PRIORITY_CLASS_LABEL, "")
    if new_name == (old["metadata"].get("labels") or {}).get(PRIORITY_CLASS_LABEL, ""):
        return []
    if while_suspended and (obj.get("spec") or {}).get("suspend") and new_name:
        return []
    return [f'metadata.labels[{PRIORITY_CLASS_LABEL}]: Invalid value: "{new_name}": field is immutable']


def aggregate(errs: list[str]) -> str:
    """field.ErrorList.ToAggregate().Error(): one message, or [a, b]."""
    return errs[0] if len(errs) == 1 else f"[{', '.join(errs)}]"
