"""Why a RayCluster's pods cannot start, and whose problem it is: the user's (image, secret,
toleration, quota) or the platform's (the containers OpenShift AI adds: KubeRay's on 3.x, the
CodeFlare operator's on 2.x).

Reads KubeRay v1.4's status (the ReplicaFailure condition: reasons FailedCreateHeadPod /
FailedCreateWorkerPod, message `errors.Join(reason, the apiserver's error)`) and the pods'
container statuses as kubelet v1.31 writes them:
- an image pull that failed waits in ErrImagePull (message: the runtime's error), then
  alternates with ImagePullBackOff ('Back-off pulling image "..."') while the kubelet retries
  with back-off 10 s, 20 s, 40 s ... 300 s;
- a container that exits is restarted, from its second exit on after a back-off (10 s doubling
  to 300 s), waiting meanwhile in CrashLoopBackOff with restartCount and lastState.terminated
  (exitCode, reason such as Error or OOMKilled, message only if it wrote a termination message).
Both can be passing (a registry outage, a crash under node pressure), so PodTrouble fails them
only once they persist."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from .scheduling import Unschedulable, parse

# Waiting reasons after which a container will not start without a change.
FATAL_WAITING = {"InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError", "CreateContainerError",
                 "SignatureValidationFailed"}
# Waiting reasons of an image that could not be pulled (yet): RegistryUnavailable is what
# kubelet v1.31 reports when the runtime says so (images.evalCRIPullErr).
PULL_WAITING = {"ErrImagePull", "ImagePullBackOff", "RegistryUnavailable"}
# A pull error no retry fixes: the registry has no such image, or refuses this pull secret.
PULL_FINAL = re.compile(r"manifest unknown|not found|name unknown|unauthorized|denied|invalid reference format|"
                        r"does not exist", re.IGNORECASE)
# How long an image may keep failing to pull (transient registry errors) before it is fatal:
# with the kubelet's back-off that is 3 failed pulls (at about 0, 10-15 and 30-45 s).
IMAGE_PULL_GRACE = 60.0
# Restarts after which a container in CrashLoopBackOff is fatal: it then has exited 4 times
# (back-offs 10 + 20 + 40 s) before its pod was ever ready. One or two crashes can be the
# node's (OOM killer under pressure, a slow volume); four in a row are the container's: the
# image, its command or too little memory, and the next back-offs (80 s, 160 s) only hold quota.
CRASH_RESTARTS = 3
# Containers OpenShift AI adds to Ray pods: KubeRay's on 3.x (red-hat-data-services/kuberay
# rhoai-3.3 authentication_controller.go GetOIDCProxySidecar), the CodeFlare operator's on 2.x
# (codeflare-operator v1.16.0 pkg/controllers/raycluster_webhook.go).
PLATFORM_CONTAINERS = {
    "kube-rbac-proxy": "the kube-rbac-proxy sidecar that OpenShift AI's KubeRay adds to the Ray head",
    "oauth-proxy": "the OAuth proxy sidecar that OpenShift AI's CodeFlare operator adds to the Ray head",
    "create-cert": "the certificate init container that OpenShift AI's CodeFlare operator adds to Ray pods",
}
REPLICA_FAILURE = "ReplicaFailure"
# OpenShift's SCC admission (openshift/apiserver-library-go sccadmission): the pod validated
# against no SecurityContextConstraints the user or its service account may use.
SCC_REFUSED = "unable to validate against any security context constraint"
# What an SCC refused, read from its field errors (sccmatching/provider.go and the strategies).
SCC_CAUSES = [
    (re.compile(r"runAsUser: Invalid value: (\d+): must be in the ranges: \[(\d+), (\d+)\]"),
     lambda m: f"the pod asks runAsUser {m[1]}, outside this namespace's UID range {m[2]}-{m[3]}"),
    (re.compile(r"provider (\S+): \S+runAsUser: Invalid value: \d+: must be: (\d+)"),
     lambda m: f"SCC {m[1]} allows only runAsUser {m[2]}"),
    (re.compile(r"fsGroup: Invalid value: \[\]int64\{[^}]*\}: (\d+) is not an allowed group"),
     lambda m: f"the pod asks fsGroup {m[1]}, outside this namespace's groups"),
    (re.compile(r"privileged: Invalid value: true"), lambda m: "a container asks to be privileged"),
    (re.compile(r"(\w+) volumes are not allowed to be used"), lambda m: f"the pod mounts a {m[1]} volume"),
    (re.compile(r"capabilities\.add: Invalid value: \"(\w+)\""), lambda m: f"a container adds capability {m[1]}"),
    (re.compile(r"Host (network|PID|IPC|ports) (?:is|are) not allowed"), lambda m: f"the pod asks for host {m[1]}"),
    (re.compile(r"allowPrivilegeEscalation: Invalid value: true"),
     lambda m: "a container sets allowPrivilegeEscalation: true"),
    (re.compile(r"(\S+) is not an allowed seccomp profile"), lambda m: f"the pod asks seccomp profile {m[1]}"),
    (re.compile(r"runAsUser: Invalid value: 0: running with the root UID"), lambda m: "the pod asks to run as root"),
]


def scc_causes(message: str) -> list[str]:
    """What in the pod the SCC admission refused, each once, from its Forbidden message."""
    out: list[str] = []
    for pattern, say in SCC_CAUSES:
        for m in pattern.finditer(message):
            text = say(m)
            if text not in out:
                out.append(text)
    return out


def condition(obj: dict, kind: str) -> dict | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


@dataclass
class ReplicaProblem:
    """KubeRay could not create a pod. `transient` when it is the platform (the CodeFlare operator) still
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
    elif SCC_REFUSED in message:
        template = ((rc.get("spec") or {}).get("headGroupSpec") or {}).get("template") or {}
        sa = (template.get("spec") or {}).get("serviceAccountName") or "default"
        causes = scc_causes(message) or ["its security context"]
        message = (f"OpenShift's security context constraints refuse the pod: {'; '.join(causes)} "
                   f"({message.split(': unable to', 1)[0]}: {SCC_REFUSED})")
        fix = (f"drop what the SCCs refuse from the cluster's pod spec (OpenShift assigns each pod a UID and fsGroup "
               f"from the namespace's range, `oc describe namespace {ns}` shows openshift.io/sa.scc.uid-range; the "
               f"image must run as that arbitrary UID: group 0 owning what it writes, HOME set to a writable "
               f"directory), or ask your cluster administrator for an SCC that allows it for the pods' service "
               f"account (`oc adm policy add-scc-to-user anyuid -z {sa} -n {ns}` for a fixed UID; privileged or "
               f"host access need their own SCC)")
    elif re.search(rf'serviceaccount "{re.escape(name)}-oauth-proxy(-[a-z0-9]+|-sa)?" not found', message):
        # codeflare-operator v1.16.0 oauthServiceAccountNameFromCluster: <name>-oauth-proxy[-<hash>];
        # KubeRay's authentication controller on 3.x: <name>-oauth-proxy-sa
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
        fix = ("check the image name and that the cluster can pull it (image pull secret)"
               if "Image" in waiting.reason or "Signature" in waiting.reason
               else "check the secrets and config maps the pod refers to (data_connection)")
        return _whose(cs, what, fix)
    verdict = unschedulable(pod)
    if verdict is not None and verdict.fatal:
        return (f"pod {pod.metadata.name} cannot be scheduled, and no node freeing up or added by an autoscaler "
                f"changes that: {verdict.message}. Fix: {verdict.fix()}")
    return None


def unschedulable(pod) -> Unschedulable | None:
    """kube-scheduler's verdict on a pod it could not place (scheduling.parse); None when the
    pod is scheduled or not (yet) judged."""
    for cond in pod.status.conditions or []:
        if cond.type == "PodScheduled" and cond.status == "False" and cond.reason == "Unschedulable":
            return parse(cond.message or "")
    return None


def _owner(container: str) -> str:
    return "OpenShift AI's KubeRay operator" if container == "kube-rbac-proxy" else "the CodeFlare operator"


def _whose(cs, what: str, fix: str) -> str:
    """The end of a problem message: whose it is, and the fix."""
    if cs.name in PLATFORM_CONTAINERS:
        return (f"{what}. This is the platform's problem, not your image's or your inputs': {cs.name} is "
                f"{PLATFORM_CONTAINERS[cs.name]} (image {cs.image or 'unknown'}). Fix: ask your OpenShift AI "
                f"administrator to check {_owner(cs.name)}'s images (pull secret, mirror registry, "
                "disconnected-install image set)")
    return f"{what}. Fix: {fix}"


# A pull failure seen only as ImagePullBackOff ("Back-off pulling image"): how much longer to
# wait for the kubelet's next try, whose ErrImagePull says why (the image back-off starts at 10 s).
PULL_ERROR_WAIT = 15.0


class PodTrouble:
    """Pod problems over successive observations: the immediate ones (pod_problem) at once;
    an image that keeps failing to pull once it has failed for `pull_grace` seconds (at once
    when the registry says the image does not exist or may not be pulled); a container in
    CrashLoopBackOff after `crash_restarts` restarts, with its exit and last log lines."""

    def __init__(self, pull_grace: float = IMAGE_PULL_GRACE, crash_restarts: int = CRASH_RESTARTS,
                 clock=time.monotonic):
        self.pull_grace, self.crash_restarts, self.clock = pull_grace, crash_restarts, clock
        self.pulling: dict[tuple, float] = {}  # (pod uid, container) -> first seen failing to pull
        self.pull_error: dict[tuple, str] = {}  # its latest ErrImagePull message
        self.suspect = False  # the last look saw a pull failing or a container restarting: look often

    def check(self, pods, previous_log=None) -> str | None:
        """A fatal problem of one of the pods, or None. `previous_log(pod, container)`: the
        last terminated instance's log tail ('' if unreadable)."""
        now = self.clock()
        seen = set()
        self.suspect = False
        for pod in pods:
            if pod.metadata.deletion_timestamp:
                continue
            problem = pod_problem(pod)
            if problem:
                return problem
            for cs in (pod.status.init_container_statuses or []) + (pod.status.container_statuses or []):
                key = (pod.metadata.uid, cs.name)
                waiting = cs.state.waiting if cs.state else None
                reason = waiting.reason if waiting else None
                self.suspect = self.suspect or reason in (*PULL_WAITING, "CrashLoopBackOff") or bool(cs.restart_count)
                if reason in PULL_WAITING:
                    seen.add(key)
                    problem = self._pull(pod, cs, key, waiting, now)
                elif reason == "CrashLoopBackOff" and (cs.restart_count or 0) >= self.crash_restarts:
                    problem = self._crash(pod, cs, waiting, previous_log)
                if problem:
                    return problem
        for key in set(self.pulling) - seen:  # pulled since, or its pod is gone
            self.pulling.pop(key, None)
        return None

    def _pull(self, pod, cs, key, waiting, now) -> str | None:
        since = self.pulling.setdefault(key, now)
        if waiting.reason != "ImagePullBackOff" and waiting.message:
            self.pull_error[key] = waiting.message
        error = self.pull_error.get(key, "")
        final = bool(PULL_FINAL.search(error))
        if not final and now - since < self.pull_grace:
            return None
        if not error and now - since < self.pull_grace + PULL_ERROR_WAIT:
            return None  # only the back-off seen (pods are looked at every few seconds): its next try says why
        said = error or waiting.message or ""
        how = "" if final else f" for {now - since:.0f}s, the kubelet retrying with back-off"
        what = (f"pod {pod.metadata.name}, container {cs.name}: image {cs.image or '?'} cannot be pulled{how} "
                f"({waiting.reason}: {said})").replace(" ()", "")
        return _whose(cs, what, "check the image name and tag, and that the cluster may pull it (the registry's "
                                "pull secret in the namespace, or a mirror in a disconnected cluster)")

    def _crash(self, pod, cs, waiting, previous_log) -> str:
        last = cs.last_state.terminated if cs.last_state else None
        exit_text = ""
        if last is not None:
            exit_text = f": it last exited with code {last.exit_code} ({last.reason or 'Error'})"
            if last.message:
                exit_text += f", saying: {last.message.strip()}"
        tail = (previous_log(pod, cs.name) if previous_log else "").rstrip()
        what = (f"pod {pod.metadata.name}, container {cs.name} keeps crashing (CrashLoopBackOff after "
                f"{cs.restart_count} restarts){exit_text}")
        oom = last is not None and (last.reason == "OOMKilled" or last.exit_code == 137)
        fix = ("give it more memory (head_memory/worker_memory): exit code 137 is a kill, usually for memory"
               if oom else "check the image (it must be able to run `ray start`: the RHOAI Ray image or one "
                           "built from it), the Ray settings and memory, from its log")
        fix += f"; `oc logs {pod.metadata.name} -c {cs.name} --previous` shows the whole log"
        return _whose(cs, what, fix) + (f"\n--- its last log lines ---\n{tail}" if tail else "")


def placement(pods) -> str:
    """'head worker-0, worker gpu-worker-0': each pod's role and the node it is bound to."""
    def role(p):
        return (p.metadata.labels or {}).get("ray.io/node-type", "pod")

    return ", ".join(f"{role(p)} {p.spec.node_name or 'unscheduled'}"
                     for p in sorted(pods, key=lambda p: (role(p) != "head", p.metadata.name)))


def pod_summary(pods) -> str:
    """One short phrase per pod: role, phase, readiness, why a container waits; then, for
    pods kube-scheduler could not place, what they wait for (once per distinct verdict)."""
    parts = []
    unplaced: dict[str, list[str]] = {}  # what they wait for -> the roles that wait for it
    for p in pods:
        role = (p.metadata.labels or {}).get("ray.io/node-type", "pod")
        if p.metadata.deletion_timestamp:
            parts.append(f"{role} terminating")
            continue
        waiting = next((f"{cs.name} {cs.state.waiting.reason}" if cs.name in PLATFORM_CONTAINERS else cs.state.waiting.reason
                        for cs in (p.status.init_container_statuses or []) + (p.status.container_statuses or [])
                        if cs.state and cs.state.waiting), None)
        verdict = unschedulable(p)
        if verdict is not None:
            waiting = waiting or "unschedulable"
            roles = unplaced.setdefault(verdict.waiting_for(), [])
            if role not in roles:
                roles.append(role)
        ready = any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        parts.append(f"{role} {p.status.phase}{' ready' if ready else ''}{f' ({waiting})' if waiting else ''}")
    notes = "".join(f"; {', '.join(roles)} not scheduled: {said}" for said, roles in unplaced.items())
    return (", ".join(parts) or "no pods yet") + notes
