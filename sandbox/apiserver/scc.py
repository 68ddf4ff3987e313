"""OpenShift's SecurityContextConstraints admission for pods, as OpenShift 4.x runs it.

Read from openshift/apiserver-library-go @ a8019f3 (pkg/securitycontextconstraints:
sccadmission/admission.go Admit, sccmatching/matcher.go and provider.go, the user/group/
capabilities/seccomp/selinux strategies, util/sort) and the SCCs the cluster-kube-apiserver-operator
installs (bindata/bootkube/scc-manifests): a pod is tried against every SCC, most restrictive first
(priority, then restriction points, then name); an SCC the requesting user and the pod's service
account may not `use` is skipped with "not usable by user or serviceaccount"; the first one the pod
validates against, after that SCC's defaults are applied, admits it (annotation `openshift.io/scc`),
the pod mutated: runAsUser from the namespace's UID range, fsGroup, the SELinux level, seccomp
RuntimeDefault, capabilities dropped, allowPrivilegeEscalation false as restricted-v2 sets them.
None: 403 `pods "x" is forbidden: unable to validate against any security context constraint: [...]`
with every SCC's errors in the apiserver's wording.

Who may use which SCC: restricted-v2 every authenticated user (ClusterRoleBinding
system:openshift:scc:restricted-v2 to system:authenticated); anyuid and privileged the group
system:cluster-admins (kube:admin) by the SCCs' own `groups`; any SCC whoever RBAC grants `use`
on `securitycontextconstraints.security.openshift.io/<name>` (`oc adm policy add-scc-to-user anyuid
-z <sa>` binds ClusterRole system:openshift:scc:anyuid). RHOAI's KubeRay overlay adds SCC
`run-as-ray-user` (red-hat-data-services/kuberay rhoai-3.3 @ 2572dfa
ray-operator/config/openshift/ray_operator_scc.yaml: runAsUser MustRunAs 1000) for the
kuberay-operator service account, so the Ray pods KubeRay creates run as uid 1000.

The requesting user: the API request's identity (REQUESTER, set by the API server); for pods the
sandbox's controllers create, the controller that creates them on a cluster (kuberay-operator for
Ray pods, kube-controller-manager's job-controller for RayJob submitters, Argo's workflow
controller for pipeline task pods).
"""

from __future__ import annotations

import copy
import re
from contextvars import ContextVar

from .admission import admission_name, forbidden
from .rbac import Identity
from .reviews import authorize

# The identity of the API request being served (server.py sets it around a create).
REQUESTER: ContextVar[Identity | None] = ContextVar("scc_requester", default=None)

SCC_ANNOTATION = "openshift.io/scc"
SUBJECT_TYPE_ANNOTATION = "security.openshift.io/validated-scc-subject-type"
SECCOMP_POD_ANNOTATION = "seccomp.security.alpha.kubernetes.io/pod"
KUBERAY_OPERATOR = "system:serviceaccount:redhat-ods-applications:kuberay-operator"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
WORKFLOW_CONTROLLER = "system:serviceaccount:{ns}:ds-pipeline-workflow-controller-dspa"
ROLE_PREFIX = "system:openshift:scc:"

_V1_DROP = ["KILL", "MKNOD", "SETUID", "SETGID"]
_VOLUMES = ["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"]


def _scc(name, run_as="MustRunAsRange", selinux="MustRunAs", fs_group="MustRunAs", sup_groups="RunAsAny",
         volumes=_VOLUMES, drop=_V1_DROP, allowed_caps=(), escalation=True, seccomp=(), priority=None,
         users=(), groups=(), host_dir=False, host_network=False, host_ports=False, host_pid=False,
         host_ipc=False, privileged=False, uid=None) -> dict:
    return {"name": name, "priority": priority, "runAsUser": {"type": run_as, **({"uid": uid} if uid else {})},
            "seLinuxContext": {"type": selinux}, "fsGroup": {"type": fs_group},
            "supplementalGroups": {"type": sup_groups}, "volumes": list(volumes) if volumes is not None else None,
            "requiredDropCapabilities": list(drop), "allowedCapabilities": list(allowed_caps),
            "defaultAddCapabilities": [], "allowPrivilegeEscalation": escalation, "seccompProfiles": list(seccomp),
            "users": list(users), "groups": list(groups), "allowHostDirVolumePlugin": host_dir,
            "allowHostNetwork": host_network, "allowHostPorts": host_ports, "allowHostPID": host_pid,
            "allowHostIPC": host_ipc, "allowPrivilegedContainer": privileged, "readOnlyRootFilesystem": False}


_V2 = {"drop": ["ALL"], "allowed_caps": ["NET_BIND_SERVICE"], "escalation": False, "seccomp": ["runtime/default"]}
_HOST_VOLUMES = ["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "hostPath", "persistentVolumeClaim",
                 "projected", "secret"]

# The standard SCCs (cluster-kube-apiserver-operator bindata/bootkube/scc-manifests) and RHOAI's.
SCCS = [
    _scc("anyuid", run_as="RunAsAny", fs_group="RunAsAny", drop=["MKNOD"], priority=10,
         groups=["system:cluster-admins"]),
    _scc("hostaccess", volumes=_HOST_VOLUMES, host_dir=True, host_network=True, host_ports=True, host_pid=True,
         host_ipc=True),
    _scc("hostmount-anyuid", run_as="RunAsAny", fs_group="RunAsAny", drop=["MKNOD"], host_dir=True,
         volumes=_HOST_VOLUMES[:6] + ["nfs"] + _HOST_VOLUMES[6:],
         users=["system:serviceaccount:openshift-infra:pv-recycler-controller"]),
    _scc("hostnetwork", sup_groups="MustRunAs", host_network=True, host_ports=True),
    _scc("hostnetwork-v2", sup_groups="MustRunAs", host_network=True, host_ports=True, **_V2),
    _scc("nonroot", run_as="MustRunAsNonRoot", fs_group="RunAsAny"),
    _scc("nonroot-v2", run_as="MustRunAsNonRoot", fs_group="RunAsAny", **_V2),
    _scc("privileged", run_as="RunAsAny", selinux="RunAsAny", fs_group="RunAsAny", volumes=["*"], drop=(),
         allowed_caps=["*"], seccomp=["*"], groups=["system:cluster-admins", "system:nodes", "system:masters"],
         users=["system:admin", "system:serviceaccount:openshift-infra:build-controller"], host_dir=True,
         host_network=True, host_ports=True, host_pid=True, host_ipc=True, privileged=True),
    _scc("restricted"),
    _scc("restricted-v2", volumes=["configMap", "downwardAPI", "emptyDir", "persistentVolumeClaim", "projected",
                                   "secret"], **_V2),
    _scc("run-as-ray-user", run_as="MustRunAs", uid=1000, volumes=None, drop=["ALL"], escalation=False,
         seccomp=["runtime/default"], users=[KUBERAY_OPERATOR]),
]
# ClusterRoleBinding system:openshift:scc:restricted-v2 (crb-systemauthenticated-scc-restricted-v2.yaml)
GRANTED_TO_AUTHENTICATED = {"restricted-v2"}


def _defaulted(scc: dict) -> dict:
    """sccdefaults.SetDefaults_SCC: no volumes listed means every type but hostPath."""
    scc = copy.deepcopy(scc)
    if scc["volumes"] is None:
        scc["volumes"] = ["*"] if scc["allowHostDirVolumePlugin"] else ["all-but-hostPath"]
    return scc


def _points(scc: dict) -> int:
    """util/sort/byrestrictions.go pointValue: the lower, the more restrictive."""
    total = 1_600_000 if scc["allowPrivilegedContainer"] else 0
    vols = set(scc["volumes"])
    if vols & {"hostPath", "*"}:
        total += 200_000
    elif vols - {"secret", "configMap", "emptyDir", "downwardAPI", "projected", "none"}:
        total += 100_000
    total += 400_000 if scc["allowHostNetwork"] else 0
    total += 800_000 if scc["allowHostPorts"] else 0
    caps = 5000 + 300 * len(scc["defaultAddCapabilities"])
    allowed = [c.upper() for c in scc["allowedCapabilities"]]
    caps += 4000 if ("*" in allowed or "ALL" in allowed) else 10 * len(allowed)
    drops = [c.upper() for c in scc["requiredDropCapabilities"]]
    caps += -3000 if "ALL" in drops else -50 * len(drops)
    total += min(max(caps, 0), 9999)
    strategy = {"RunAsAny": 40_000, "MustRunAsNonRoot": 30_000, "MustRunAsRange": 20_000, "MustRunAs": 10_000}
    return total + strategy.get(scc["seLinuxContext"]["type"], 0) + strategy.get(scc["runAsUser"]["type"], 0)


def sorted_sccs() -> list[dict]:
    """util/sort/bypriority.go: higher priority first, then more restrictive, then by name."""
    sccs = [_defaulted(s) for s in SCCS]
    return sorted(sccs, key=lambda s: (-(s["priority"] or 0), _points(s), s["name"]))


def cluster_roles() -> list[dict]:
    """The ClusterRoles system:openshift:scc:<name> (`use` on that SCC) that `oc adm policy
    add-scc-to-user` binds."""
    return [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": ROLE_PREFIX + s["name"]},
             "rules": [{"apiGroups": ["security.openshift.io"], "resources": ["securitycontextconstraints"],
                        "resourceNames": [s["name"]], "verbs": ["use"]}]} for s in SCCS]


def parse_block(value: str) -> tuple[int, int]:
    """library-go security/uid.ParseBlock: "start/size" or "start-end" -> (first, last)."""
    m = re.fullmatch(r"(\d+)/(\d+)", value.strip())
    if m:
        return int(m.group(1)), int(m.group(1)) + int(m.group(2)) - 1
    m = re.fullmatch(r"(\d+)-(\d+)", value.strip())
    if not m:
        raise ValueError(f"unable to parse block {value!r}")
    return int(m.group(1)), int(m.group(2))


# --- Go's rendering of field.Error values ----------------------------------------------
def _go(value, kind: str = "") -> str:
    if value is None:
        return {"bool": "(*bool)(nil)", "caps": "(*core.Capabilities)(nil)", "capslist": "[]core.Capability(nil)",
                "int": "(*int64)(nil)"}.get(kind, "<nil>")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if kind == "int64s":
        return "[]int64{" + ", ".join(str(v) for v in value) + "}"
    if kind == "capslist":
        return "[]core.Capability{" + ", ".join(_go(str(v)) for v in value) + "}"
    return repr(value)


def _invalid(path: str, value, detail: str, kind: str = "") -> str:
    return f"{path}: Invalid value: {_go(value, kind)}" + (f": {detail}" if detail else "")


def _required(path: str, detail: str = "") -> str:
    return f"{path}: Required value" + (f": {detail}" if detail else "")


class Provider:
    """sccmatching.simpleProvider: one SCC with the namespace's pre-allocated values."""

    def __init__(self, scc: dict, ns_annotations: dict):
        self.scc = scc
        self.name = scc["name"]
        ann = ns_annotations
        run_as = dict(scc["runAsUser"])
        if run_as["type"] == "MustRunAsRange" and "uidRangeMin" not in run_as:
            run_as["uidRangeMin"], run_as["uidRangeMax"] = parse_block(ann["openshift.io/sa.scc.uid-range"])
        self.run_as = run_as
        self.level = ann["openshift.io/sa.scc.mcs"] if scc["seLinuxContext"]["type"] == "MustRunAs" else None
        groups = ann.get("openshift.io/sa.scc.supplemental-groups") or ann["openshift.io/sa.scc.uid-range"]
        blocks = [parse_block(b) for b in groups.split(",")]
        # fsGroup: the first block's first ID only; supplementalGroups: every block
        self.fs_ranges = [(blocks[0][0], blocks[0][0])] if scc["fsGroup"]["type"] == "MustRunAs" else None
        self.sup_ranges = blocks if scc["supplementalGroups"]["type"] == "MustRunAs" else None
        profiles = scc["seccompProfiles"]
        self.seccomp_any = "*" in profiles
        self.seccomp = [p for p in profiles if p != "*"]

    # --- defaults (Create*SecurityContext) ---------------------------------------------
    def assign(self, pod: dict) -> list[str]:
        """AssignSecurityContext: apply the SCC's defaults to the pod, then validate; the errors."""
        p = f"provider {self.name}: "
        spec = pod.setdefault("spec", {})
        psc = spec.get("securityContext") or {}
        spec["securityContext"] = psc
        if psc.get("supplementalGroups") is None and self.sup_ranges:
            psc["supplementalGroups"] = [self.sup_ranges[0][0]]
        if psc.get("fsGroup") is None and self.fs_ranges:
            psc["fsGroup"] = self.fs_ranges[0][0]
        if psc.get("seLinuxOptions") is None and self.level:
            psc["seLinuxOptions"] = {"level": self.level}
        ann = pod.setdefault("metadata", {}).get("annotations") or {}
        profile = ann.get(SECCOMP_POD_ANNOTATION) or _profile_name(psc.get("seccompProfile")) or (
            self.seccomp[0] if self.seccomp else "")
        if profile:
            ann = {**ann, SECCOMP_POD_ANNOTATION: profile}
            psc["seccompProfile"] = _profile_field(profile)
        pod["metadata"]["annotations"] = ann
        errs = self._validate_pod(pod, f"{p}.spec.securityContext")
        for key in ("initContainers", "containers", "ephemeralContainers"):
            for i, c in enumerate(spec.get(key) or []):
                self._assign_container(pod, c)
                errs += self._validate_container(pod, c, f"{p}.{key}[{i}]")
        return errs

    def _assign_container(self, pod: dict, c: dict) -> None:
        psc = pod["spec"]["securityContext"]
        sc = dict(c.get("securityContext") or {})
        run_as_user = sc.get("runAsUser", psc.get("runAsUser"))
        if run_as_user is None:
            generated = {"MustRunAsRange": self.run_as.get("uidRangeMin"),
                         "MustRunAs": self.run_as.get("uid")}.get(self.run_as["type"])
            if generated is not None:
                sc["runAsUser"] = run_as_user = generated
        if sc.get("seLinuxOptions", psc.get("seLinuxOptions")) is None and self.level:
            sc["seLinuxOptions"] = {"level": self.level}
        if sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is None:
            if (run_as_user is None and self.run_as["type"] == "MustRunAsNonRoot") or (run_as_user or 0) > 0:
                sc["runAsNonRoot"] = True
        caps = self._capabilities(sc.get("capabilities"))
        if caps is None:
            sc.pop("capabilities", None)
        else:
            sc["capabilities"] = caps
        if self.scc["readOnlyRootFilesystem"] and sc.get("readOnlyRootFilesystem") is None:
            sc["readOnlyRootFilesystem"] = True
        if self.scc["allowPrivilegeEscalation"] is False and sc.get("allowPrivilegeEscalation") is None:
            sc["allowPrivilegeEscalation"] = False
        c["securityContext"] = sc

    def _capabilities(self, caps: dict | None) -> dict | None:
        """capabilities.defaultCapabilities.Generate."""
        add, drop = set((caps or {}).get("add") or []), set((caps or {}).get("drop") or [])
        default_add = set(self.scc["defaultAddCapabilities"]) - drop
        combined_add, combined_drop = default_add | add, set(self.scc["requiredDropCapabilities"]) | drop
        if len(combined_add) == len(add) and len(combined_drop) == len(drop):
            return caps
        out = {}
        if combined_add:
            out["add"] = sorted(combined_add)
        if combined_drop:
            out["drop"] = sorted(combined_drop)
        return out

    # --- validation (Validate*SecurityContext) -------------------------------------------
    def _groups(self, path: str, field: str, ranges, groups: list[int]) -> list[str]:
        if ranges is None:
            return []
        errs = []
        if not groups:
            errs.append(_invalid(f"{path}.{field}", groups, "unable to validate empty groups against required ranges",
                                 "int64s"))
        for g in groups:
            if not any(lo <= g <= hi for lo, hi in ranges):
                errs.append(_invalid(f"{path}.{field}", groups, f"{g} is not an allowed group", "int64s"))
        return errs

    def _seccomp(self, path: str, profile: str) -> list[str]:
        if not self.seccomp_any and not self.seccomp and profile:
            return [f"{path}: Forbidden: seccomp may not be set"]
        if (not self.seccomp and not profile) or self.seccomp_any:
            return []
        runtime_default = {"runtime/default", "docker/default"}
        if profile in self.seccomp or (runtime_default & set(self.seccomp) and profile in runtime_default):
            return []
        return [f"{path}: Forbidden: {profile} is not an allowed seccomp profile. Valid values are "
                f"[{' '.join(self.seccomp)}]"]

    def _selinux(self, path: str, opts: dict | None) -> list[str]:
        if self.level is None:
            return []
        if opts is None:
            return [_required(path)]
        errs = []
        if not _equal_levels(self.level, opts.get("level") or ""):
            errs.append(_invalid(f"{path}.level", opts.get("level") or "", f"must be {self.level}"))
        for key in ("role", "type", "user"):
            if opts.get(key):
                errs.append(_invalid(f"{path}.{key}", opts[key], "must be "))
        return errs

    def _validate_pod(self, pod: dict, path: str) -> list[str]:
        spec, scc = pod["spec"], self.scc
        psc = spec["securityContext"]
        fs = [psc["fsGroup"]] if psc.get("fsGroup") is not None else []
        errs = self._groups(path, "fsGroup", self.fs_ranges, fs)
        errs += self._groups(path, "supplementalGroups", self.sup_ranges, list(psc.get("supplementalGroups") or []))
        profile = (pod["metadata"].get("annotations") or {}).get(SECCOMP_POD_ANNOTATION) or \
            _profile_name(psc.get("seccompProfile"))
        errs += self._seccomp(f"pod.metadata.annotations[{SECCOMP_POD_ANNOTATION}]", profile)
        errs += self._selinux(f"{path}.seLinuxOptions", psc.get("seLinuxOptions"))
        for key, allowed, what in (("hostNetwork", "allowHostNetwork", "Host network"),
                                   ("hostPID", "allowHostPID", "Host PID"), ("hostIPC", "allowHostIPC", "Host IPC")):
            if not scc[allowed] and spec.get(key):
                errs.append(_invalid(f"{path}.{key}", True, f"{what} is not allowed to be used"))
        allowed_vols = set(scc["volumes"])
        if not allowed_vols & {"*"}:
            for i, v in enumerate(spec.get("volumes") or []):
                kind = next((k for k in v if k != "name"), "")
                ok = kind in allowed_vols or ("all-but-hostPath" in allowed_vols and kind != "hostPath")
                if not ok:
                    errs.append(_invalid(f"spec.volumes[{i}]", kind, f"{kind} volumes are not allowed to be used"))
        return errs

    def _validate_container(self, pod: dict, c: dict, path: str) -> list[str]:
        spec, scc = pod["spec"], self.scc
        psc, sc = spec["securityContext"], c.get("securityContext") or {}
        errs = []
        run_as_user = sc.get("runAsUser", psc.get("runAsUser"))
        non_root = sc.get("runAsNonRoot", psc.get("runAsNonRoot"))
        kind = self.run_as["type"]
        if kind in ("MustRunAsRange", "MustRunAs") and run_as_user is None:
            errs.append(_required(f"{path}.runAsUser"))
        elif kind == "MustRunAsRange":
            lo, hi = self.run_as["uidRangeMin"], self.run_as["uidRangeMax"]
            if not lo <= run_as_user <= hi:
                errs.append(_invalid(f"{path}.runAsUser", run_as_user, f"must be in the ranges: [{lo}, {hi}]"))
        elif kind == "MustRunAs" and run_as_user != self.run_as["uid"]:
            errs.append(_invalid(f"{path}.runAsUser", run_as_user, f"must be: {self.run_as['uid']}"))
        elif kind == "MustRunAsNonRoot":
            if non_root is None and run_as_user is None:
                errs.append(_required(f"{path}.runAsNonRoot", "must be true"))
            elif non_root is False:
                errs.append(_invalid(f"{path}.runAsNonRoot", False, "must be true"))
            elif run_as_user == 0:
                errs.append(_invalid(f"{path}.runAsUser", 0, "running with the root UID is forbidden"))
        errs += self._selinux(f"{path}.seLinuxOptions", sc.get("seLinuxOptions", psc.get("seLinuxOptions")))
        profile = _profile_name(sc.get("seccompProfile")) or _profile_name(psc.get("seccompProfile")) or \
            (pod["metadata"].get("annotations") or {}).get(SECCOMP_POD_ANNOTATION, "")
        errs += self._seccomp(f"pod.metadata.annotations[container.seccomp.security.alpha.kubernetes.io/{c.get('name')}]",
                              profile)
        if not scc["allowPrivilegedContainer"] and sc.get("privileged"):
            errs.append(_invalid(f"{path}.privileged", True, "Privileged containers are not allowed"))
        errs += self._validate_caps(path, sc.get("capabilities"))
        if not scc["allowHostNetwork"] and spec.get("hostNetwork"):
            errs.append(_invalid(f"{path}.hostNetwork", True, "Host network is not allowed to be used"))
        if not scc["allowHostPorts"]:
            for key in ("initContainers", "containers", "ephemeralContainers"):
                for i, other in enumerate(spec.get(key) or []):
                    for port in other.get("ports") or []:
                        if (port.get("hostPort") or 0) > 0:
                            errs.append(_invalid(f"{path.split(': ')[0]}: .{key}[{i}].hostPort", port["hostPort"],
                                                 "Host ports are not allowed to be used"))
        for key, allowed, what in (("hostPID", "allowHostPID", "Host PID"), ("hostIPC", "allowHostIPC", "Host IPC")):
            if not scc[allowed] and spec.get(key):
                errs.append(_invalid(f"{path}.{key}", True, f"{what} is not allowed to be used"))
        escalation = sc.get("allowPrivilegeEscalation")
        if scc["allowPrivilegeEscalation"] is False and escalation is not False:
            errs.append(_invalid(f"{path}.allowPrivilegeEscalation", escalation,
                                 "Allowing privilege escalation for containers is not allowed", "bool"))
        return errs

    def _validate_caps(self, path: str, caps: dict | None) -> list[str]:
        scc = self.scc
        if caps is None:
            if not scc["defaultAddCapabilities"] and not scc["requiredDropCapabilities"]:
                return []
            return [_invalid(f"{path}.capabilities", None, "required capabilities are not set on the securityContext",
                             "caps")]
        if "*" in scc["allowedCapabilities"]:
            return []
        errs = []
        allowed = set(scc["allowedCapabilities"]) | set(scc["defaultAddCapabilities"])
        for cap in caps.get("add") or []:
            if cap not in allowed:
                errs.append(_invalid(f"{path}.capabilities.add", cap, "capability may not be added"))
        drops = caps.get("drop") or None
        for cap in scc["requiredDropCapabilities"]:
            if cap not in (drops or []):
                errs.append(_invalid(f"{path}.capabilities.drop", drops, f"{cap} is required to be dropped but was not "
                                     "found", "capslist"))
        return errs


def _profile_name(field: dict | None) -> str:
    """seccompAnnotationForField."""
    kind = (field or {}).get("type")
    if kind == "Unconfined":
        return "unconfined"
    if kind == "RuntimeDefault":
        return "runtime/default"
    if kind == "Localhost" and field.get("localhostProfile"):
        return "localhost/" + field["localhostProfile"]
    return ""


def _profile_field(profile: str) -> dict:
    """seccompFieldForAnnotation."""
    if profile == "unconfined":
        return {"type": "Unconfined"}
    if profile in ("runtime/default", "docker/default"):
        return {"type": "RuntimeDefault"}
    if profile.startswith("localhost/"):
        return {"type": "Localhost", "localhostProfile": profile[len("localhost/"):]}
    return {}


def _equal_levels(expected: str, actual: str) -> bool:
    if expected == actual:
        return True
    e, a = expected.split(":", 1), actual.split(":", 1)
    return len(e) == 2 and len(a) == 2 and e[0] == a[0] and sorted(e[1].split(",")) == sorted(a[1].split(","))


def _aggregate(msgs: list[str]) -> str:
    """utilerrors.NewAggregate(...).Error(): duplicates once; one error bare, more in brackets."""
    seen: list[str] = []
    for m in msgs:
        if m not in seen:
            seen.append(m)
    return seen[0] if len(seen) == 1 else "[" + ", ".join(seen) + "]"


def service_account_identity(namespace: str, name: str) -> Identity:
    """serviceaccount.UserInfo: the pod's service account as a user, in its groups."""
    return Identity(f"system:serviceaccount:{namespace}:{name}", "", [],
                    ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"])


def controller_identity(pod: dict) -> Identity:
    """Who creates this pod on a cluster when a sandbox controller creates it (no API request)."""
    labels = pod["metadata"].get("labels") or {}
    if "ray.io/node-type" in labels:
        user = KUBERAY_OPERATOR
    elif "batch.kubernetes.io/job-name" in labels or "job-name" in labels:
        user = JOB_CONTROLLER
    else:
        user = WORKFLOW_CONTROLLER.format(ns=pod["metadata"].get("namespace") or "default")
    ns = user.split(":")[2]
    return Identity(user, "", [], ["system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"])


class SCCAdmission:
    """security.openshift.io/SecurityContextConstraint, mutating on pod create (a store admission
    plugin, so controllers' creates are judged as a client's are)."""

    def __init__(self, store, registry, allocator, policy):
        """allocator: namespaces.SecurityAllocator (the namespace's UID range and MCS level);
        policy: the RBAC objects applied through the API (policy.StoredPolicy)."""
        self.store, self.allocator, self.policy = store, allocator, policy
        self.sccs = sorted_sccs()

    def _applies(self, scc: dict, who: Identity, namespace: str) -> bool:
        """sccmatching.ConstraintAppliesTo: the SCC's users and groups, else RBAC `use`."""
        if who.user in scc["users"] or set(who.groups) & set(scc["groups"]):
            return True
        if scc["name"] in GRANTED_TO_AUTHENTICATED and "system:authenticated" in who.groups:
            return True
        attrs = {"verb": "use", "group": "security.openshift.io", "resource": "securitycontextconstraints",
                 "name": scc["name"], "namespace": namespace}
        return authorize(who, attrs, self.policy)[0]

    def __call__(self, rt, obj: dict) -> None:
        if rt.key != ("", "pods") or ((obj.get("spec") or {}).get("os") or {}).get("name") == "windows":
            return
        meta = obj.setdefault("metadata", {})
        ns = meta.get("namespace") or "default"
        ann = self.allocator.ensure(ns)
        if ann is None:
            return  # the namespace check answers first
        who = REQUESTER.get() or controller_identity(obj)
        sa = (obj.get("spec") or {}).get("serviceAccountName") or (obj.get("spec") or {}).get("serviceAccount") or ""
        sa_who = service_account_identity(ns, sa) if sa else None
        errs: list[str] = []
        denied: set[str] = set()
        chosen = None
        for scc in self.sccs:
            if sa_who is not None and self._applies(scc, sa_who, ns):
                subject = "serviceaccount"
            elif self._applies(scc, who, ns):
                subject = "user"
            else:
                denied.add(scc["name"])
                errs.append(f'provider "{scc["name"]}": Forbidden: not usable by user or serviceaccount')
                continue
            candidate = copy.deepcopy(obj)
            failures = Provider(scc, ann).assign(candidate)
            if failures:
                errs += failures
                continue
            chosen = (scc["name"], subject, candidate)
            break
        if chosen is None:
            restricted = next((s for s in self.sccs if s["name"] == "restricted"), None)
            if "restricted" in denied and restricted and not Provider(restricted, ann).assign(copy.deepcopy(obj)):
                errs.append("no access to scc/restricted: Forbidden: the pod fails to validate against the "
                            "`restricted-v2` security context constraint, but would validate successfully against "
                            "the `restricted` security context constraint")
            raise forbidden(rt, admission_name(obj),
                            f"unable to validate against any security context constraint: {_aggregate(errs)}")
        name, subject, admitted = chosen
        obj["spec"] = admitted["spec"]
        meta["annotations"] = {**(admitted["metadata"].get("annotations") or {}),
                               SCC_ANNOTATION: name, SUBJECT_TYPE_ANNOTATION: subject}


def install(store, registry, allocator, policy) -> SCCAdmission:
    """Add the SCC admission to the store's mutating plugins and the system:openshift:scc:*
    ClusterRoles to the store (as the cluster has them)."""
    role_t = registry.by_kind("rbac.authorization.k8s.io", "ClusterRole")
    for role in cluster_roles():
        if store.find(role_t, None, role["metadata"]["name"]) is None:
            store.create(role_t, role)
    plugin = SCCAdmission(store, registry, allocator, policy)
    store.admission.append(plugin)
    return plugin

