"""Why a RayCluster's pods cannot start, and whose problem it is: the user's (image, secret,
toleration, quota) or the platform's (the containers RHOAI's CodeFlare operator adds).

Reads KubeRay v1.4's status (the ReplicaFailure condition: reasons FailedCreateHeadPod /
FailedCreateWorkerPod, message `errors.Join(reason, the apiserver's error)`) and the pods'
container statuses."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Waiting reasons after which a container will not start without a change.
FATAL_WAITING = {"ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError",
                 "CreateContainerError"}
# Containers the CodeFlare operator's webhook adds (codeflare-operator v1.16.0
# pkg/controllers/raycluster_webhook.go: oauthProxyContainerName, initContainerName).
PLATFORM_CONTAINERS = {
    "oauth-proxy": "the OAuth proxy sidecar that OpenShift AI's CodeFlare operator adds to the Ray head",
    "create-cert": "the certificate init container that OpenShift AI's CodeFlare operator adds to Ray pods",
}
REPLICA_FAILURE = "ReplicaFailure"


def condition(obj: dict, kind: str) -> dict | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


@dataclass
class ReplicaProblem:
    """KubeRay could not create a pod. `transient` when it is the CodeFlare operator still
    setting up (its ServiceAccount not created yet): worth waiting for."""
    reason: str
    message: str
    fix: str
    transient: bool = False

    def __str__(self) -> str:
        return f"KubeRay could not create the cluster's pods ({self.reason}): {self.message}. Fix: {self.fix}"


def replica_failure(rc: dict) -> ReplicaProblem | None:
    """KubeRay's ReplicaFailure condition, classified; None when absent."""
    cond = condition(rc, REPLICA_FAILURE)
    if not cond or cond.get("status") != "True":
        return None
    name, ns = rc["metadata"]["name"], rc["metadata"]["namespace"]
    reason = cond.get("reason") or REPLICA_FAILURE
    # errors.Join puts the reason on its own line before the apiserver's message.
    lines = [li.strip() for li in (cond.get("message") or "").splitlines() if li.strip() and li.strip() != reason]
    message = "; ".join(lines) or "(no message)"
    if "exceeded quota" in message:
        fix = (f"the namespace's ResourceQuota has no room for these pods (Kueue's quota is separate): request less "
               f"(num_workers, head_/worker_cpu, head_/worker_memory) or ask your administrator to raise it "
               f"(`oc describe resourcequota -n {ns}`)")
    elif re.search(r"(maximum|minimum) \S+ usage per (Container|Pod)", message):
        fix = f"fit the requests and limits in the namespace's LimitRange (`oc describe limitrange -n {ns}`)"
    elif re.search(rf'serviceaccount "{re.escape(name)}-oauth-proxy(-[a-z0-9]+)?" not found', message):
        # codeflare-operator v1.16.0 oauthServiceAccountNameFromCluster: <name>-oauth-proxy[-<hash>]
        return ReplicaProblem(reason, message, "", transient=True)
    else:
        fix = f"see `oc describe raycluster {name} -n {ns}` (its FailedToCreate*Pod events) and the namespace's admission policies"
    return ReplicaProblem(reason, message, fix)


def pod_problem(pod) -> str | None:
    """Why a pod (kubernetes client V1Pod) cannot start without a change, naming the
    container and whose problem it is; None if it may still start."""
    if pod.metadata.deletion_timestamp:
        return None  # terminating (an earlier incarnation): not what will run
    statuses = (pod.status.container_statuses or []) + (pod.status.init_container_statuses or [])
    for cs in statuses:
        waiting = cs.state.waiting if cs.state else None
        if not waiting or waiting.reason not in FATAL_WAITING:
            continue
        what = f"pod {pod.metadata.name}, container {cs.name}: {waiting.reason}: {waiting.message or ''}".rstrip(": ")
        if cs.name in PLATFORM_CONTAINERS:
            image = "" if cs.image and cs.image in what else f" (image {cs.image or 'unknown'})"
            return (f"{what}. This is the platform's problem, not your image's or your inputs': {cs.name} is "
                    f"{PLATFORM_CONTAINERS[cs.name]}{image}. Fix: ask your OpenShift AI "
                    "administrator to check the CodeFlare operator's images (pull secret, mirror registry, "
                    "disconnected-install image set)")
        fix = ("check the image name and that the cluster can pull it (image pull secret)" if "Image" in waiting.reason
               else "check the secrets and config maps the pod refers to (data_connection)")
        return f"{what}. Fix: {fix}"
    for cond in pod.status.conditions or []:
        if cond.type == "PodScheduled" and cond.status == "False" and "untolerated taint" in (cond.message or ""):
            return (f"pod {pod.metadata.name} cannot be scheduled: {cond.message}. Fix: add a matching toleration "
                    "(`tolerations`, e.g. nvidia.com/gpu for GPU nodes) or a node_selector for nodes it may use")
    return None


def pod_summary(pods) -> str:
    """One short phrase per pod: role, phase, readiness, why a container waits."""
    parts = []
    for p in pods:
        role = (p.metadata.labels or {}).get("ray.io/node-type", "pod")
        if p.metadata.deletion_timestamp:
            parts.append(f"{role} terminating")
            continue
        waiting = next((f"{cs.name} {cs.state.waiting.reason}" if cs.name in PLATFORM_CONTAINERS else cs.state.waiting.reason
                        for cs in (p.status.init_container_statuses or []) + (p.status.container_statuses or [])
                        if cs.state and cs.state.waiting), None)
        ready = any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        parts.append(f"{role} {p.status.phase}{' ready' if ready else ''}{f' ({waiting})' if waiting else ''}")
    return ", ".join(parts) or "no pods yet"
