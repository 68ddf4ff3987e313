"""Defaulting and create/update strategy of core objects, as kube-apiserver v1.31 does them.

What a client reads back after creating a Pod, Service, Namespace or Secret:
- defaults (pkg/apis/core/v1/defaults.go and the generated `+default` markers): Pod
  restartPolicy, dnsPolicy, schedulerName, terminationGracePeriodSeconds,
  enableServiceLinks, securityContext, container terminationMessage*, imagePullPolicy by
  tag, port protocols, probe timings; Service type, sessionAffinity, port protocol and
  targetPort, internalTrafficPolicy; Secret type; Namespace name label;
- the registry strategies (pkg/registry/core/*/strategy.go): a created Pod's status is
  phase Pending with its qosClass, a Namespace's is Active with spec.finalizers
  [kubernetes], a Service gets a clusterIP from the service network (OpenShift's default
  172.30.0.0/16) unless it is headless or ExternalName; Secret stringData is merged into
  data (the v1 conversion); on update, allocated clusterIPs and nodePorts are kept;
- admission plugins every cluster runs: ServiceAccount (serviceAccountName `default`, the
  account must exist, the kube-api-access-* projected token volume), Priority (priority
  0, preemptionPolicy) and DefaultTolerationSeconds (not-ready/unreachable for 300 s).

`Defaulter.admit` has the signature of an API server admission plugin, so the server runs
it first, on create and update, dry-run included.
"""

from __future__ import annotations

import base64
import copy
import ipaddress
import random
import time

from .. import quantity
from . import errors
from .errors import ApiError

SERVICE_CIDR = "172.30.0.0/16"  # OpenShift's default serviceNetwork
NODE_PORTS = (30000, 32767)
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_SA_WAIT_S = 2.0  # the ServiceAccount plugin retries `default` 10 times, 100-200 ms apart
_QOS_RESOURCES = ("cpu", "memory")


def image_pull_policy(image: str) -> str:
    """Always for `:latest` or no tag (and no digest), IfNotPresent otherwise (parsers.ParseImageName)."""
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    tag = last.rpartition(":")[2] if ":" in last else ""
    if not tag and not digest:
        tag = "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def _probe(probe: dict | None) -> None:
    if not isinstance(probe, dict):
        return
    for k, v in (("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1), ("failureThreshold", 3)):
        if not probe.get(k):
            probe[k] = v
    http = probe.get("httpGet")
    if isinstance(http, dict):
        http.setdefault("path", "/")
        http.setdefault("scheme", "HTTP")
        if not http["path"]:
            http["path"] = "/"


def _container(c: dict) -> None:
    if not c.get("imagePullPolicy"):
        c["imagePullPolicy"] = image_pull_policy(c.get("image") or "")
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    c.setdefault("resources", {})
    for port in c.get("ports") or []:
        port.setdefault("protocol", "TCP")
    for key in ("livenessProbe", "readinessProbe", "startupProbe"):
        _probe(c.get(key))
    for env in c.get("env") or []:
        ref = (env.get("valueFrom") or {}).get("fieldRef")
        if isinstance(ref, dict):
            ref.setdefault("apiVersion", "v1")


def _volume(v: dict) -> None:
    sources = [k for k in v if k != "name"]
    if not sources:
        v["emptyDir"] = {}
    for key in ("secret", "configMap", "downwardAPI", "projected"):
        if isinstance(v.get(key), dict):
            v[key].setdefault("defaultMode", 420)
    for src in (v.get("projected") or {}).get("sources") or []:
        token = src.get("serviceAccountToken")
        if isinstance(token, dict):
            token.setdefault("expirationSeconds", 3600)
    if isinstance(v.get("hostPath"), dict):
        v["hostPath"].setdefault("type", "")


def default_pod_spec(spec: dict) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("schedulerName", "default-scheduler")
    if spec.get("securityContext") is None:
        spec["securityContext"] = {}
    for key in ("containers", "initContainers", "ephemeralContainers"):
        for c in spec.get(key) or []:
            _container(c)
    for v in spec.get("volumes") or []:
        _volume(v)


def default_pod(pod: dict) -> None:
    spec = pod.setdefault("spec", {})
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            res = c.get("resources") or {}
            if res.get("limits"):
                requests = res.setdefault("requests", {})
                for k, v in res["limits"].items():
                    requests.setdefault(k, v)
                c["resources"] = res
    default_pod_spec(spec)
    spec.setdefault("enableServiceLinks", True)
    if spec.get("hostNetwork"):
        for key in ("containers", "initContainers"):
            for c in spec.get(key) or []:
                for p in c.get("ports") or []:
                    p.setdefault("hostPort", p.get("containerPort"))


def _qty(value):
    try:
        return quantity.parse(value)
    except ValueError:
        return value


def qos_class(pod: dict) -> str:
    """pkg/apis/core/helper/qos: Guaranteed, Burstable or BestEffort (cpu and memory only)."""
    spec = pod.get("spec") or {}
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    any_set, guaranteed = False, True
    for c in containers:
        res = c.get("resources") or {}
        req = {k: v for k, v in (res.get("requests") or {}).items() if k in _QOS_RESOURCES}
        lim = {k: v for k, v in (res.get("limits") or {}).items() if k in _QOS_RESOURCES}
        any_set = any_set or bool(req) or bool(lim)
        if set(lim) != set(_QOS_RESOURCES):
            guaranteed = False
        if any(k not in lim or _qty(req[k]) != _qty(lim[k]) for k in req):
            guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def default_service(svc: dict) -> None:
    spec = svc.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    if not spec.get("sessionAffinity"):
        spec["sessionAffinity"] = "None"
    if spec["sessionAffinity"] == "None":
        spec.pop("sessionAffinityConfig", None)
    elif spec["sessionAffinity"] == "ClientIP":
        cfg = spec.setdefault("sessionAffinityConfig", {}).setdefault("clientIP", {})
        cfg.setdefault("timeoutSeconds", 10800)
    for p in spec.get("ports") or []:
        p.setdefault("protocol", "TCP")
        if p.get("targetPort") in (None, 0, ""):
            p["targetPort"] = p.get("port")
    external = spec["type"] in ("NodePort", "LoadBalancer") or bool(spec.get("externalIPs"))
    if external and not spec.get("externalTrafficPolicy"):
        spec["externalTrafficPolicy"] = "Cluster"
    if spec["type"] in ("ClusterIP", "NodePort", "LoadBalancer"):
        spec.setdefault("internalTrafficPolicy", "Cluster")
    if spec["type"] == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)


def default_secret(secret: dict) -> None:
    if not secret.get("type"):
        secret["type"] = "Opaque"
    string_data = secret.pop("stringData", None)
    if string_data:
        data = secret.setdefault("data", {}) or {}
        for k, v in string_data.items():
            data[k] = base64.b64encode(str(v).encode()).decode()
        secret["data"] = data


def default_namespace(ns: dict) -> None:
    name = (ns.get("metadata") or {}).get("name")
    if name:  # nameless (generateName) namespaces cannot be labelled yet
        labels = ns["metadata"].get("labels") or {}
        labels["kubernetes.io/metadata.name"] = name
        ns["metadata"]["labels"] = labels


DEFAULTERS = {"pods": default_pod, "services": default_service, "secrets": default_secret,
              "namespaces": default_namespace}


def apply_defaults(plural: str, obj: dict) -> None:
    """The v1 defaulting of a core object (no strategy, no store access)."""
    fn = DEFAULTERS.get(plural)
    if fn is not None:
        fn(obj)


class Defaulter:
    """Defaults, strategy and the built-in admission plugins for core objects."""

    def __init__(self, store, registry, service_cidr: str = SERVICE_CIDR):
        self.store, self.registry = store, registry
        self.network = ipaddress.ip_network(service_cidr)

    # --- the admission plugin the server runs first ------------------------------
    def admit(self, op: str, rt, obj: dict, old: dict | None) -> None:
        if rt.group:
            return
        apply_defaults(rt.plural, obj)
        prepare = getattr(self, f"_{rt.plural}", None)
        if prepare is not None:
            prepare(op, obj, old)

    # --- strategies --------------------------------------------------------------
    def _pods(self, op: str, pod: dict, old: dict | None) -> None:
        if op != "CREATE":
            return
        self._service_account(pod)
        spec = pod["spec"]
        if not spec.get("priorityClassName"):
            spec.setdefault("priority", 0)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        tolerations = spec.get("tolerations") or []
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            if not any(t.get("key") == key and t.get("effect") in (None, "", "NoExecute") for t in tolerations):
                tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
        spec["tolerations"] = tolerations
        pod["status"] = {"phase": "Pending", "qosClass": qos_class(pod)}

    def _service_account(self, pod: dict) -> None:
        """plugin/pkg/admission/serviceaccount (v1.31): default it, require it, mount its token."""
        spec, meta = pod["spec"], pod["metadata"]
        name = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
        spec["serviceAccountName"] = spec["serviceAccount"] = name
        ns = meta.get("namespace")
        sa = self._find_service_account(ns, name)
        if sa is None:
            rt = self.registry.get("", "pods")
            what = f'{errors.qualified(rt)} "{meta["name"]}"' if meta.get("name") else errors.qualified(rt)
            raise ApiError(403, "Forbidden", f'{what} is forbidden: error looking up service account {ns}/{name}: '
                                             f'serviceaccount "{name}" not found',
                           {"name": meta.get("name", ""), "kind": "pods"})
        automount = spec.get("automountServiceAccountToken")
        if automount is None:
            automount = sa.get("automountServiceAccountToken", True)
        if not automount:
            return
        containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
        if any(m.get("mountPath") == SA_MOUNT for c in containers for m in c.get("volumeMounts") or []):
            return
        volume = f"kube-api-access-{''.join(random.choice('bcdfghjklmnpqrstvwxz2456789') for _ in range(5))}"
        spec.setdefault("volumes", []).append({"name": volume, "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            # OpenShift adds its service CA bundle to the same projected volume.
            {"configMap": {"name": "openshift-service-ca.crt", "items": [{"key": "service-ca.crt", "path": "service-ca.crt"}]}},
        ]}})
        for c in containers:
            c.setdefault("volumeMounts", []).append({"name": volume, "readOnly": True, "mountPath": SA_MOUNT})

    def _find_service_account(self, namespace: str, name: str) -> dict | None:
        rt = self.registry.get("", "serviceaccounts")
        sa = self.store.find(rt, namespace, name)
        if sa is not None or name != "default":
            return sa
        # The default account is made by a controller when the namespace appears: give it
        # the time the real plugin gives it (it retries), waiting on store changes.
        deadline = time.monotonic() + DEFAULT_SA_WAIT_S
        while sa is None and time.monotonic() < deadline:
            self.store.wait_for_change(self.store.rv, min(0.2, max(0.0, deadline - time.monotonic())))
            sa = self.store.find(rt, namespace, name)
        return sa

    def _services(self, op: str, svc: dict, old: dict | None) -> None:
        spec, rt = svc["spec"], self.registry.get("", "services")
        old_spec = (old or {}).get("spec") or {}
        if op == "UPDATE" and old is not None:
            # patchAllocatedValues: what the allocator gave is kept when the update omits it.
            if old_spec.get("type") == spec.get("type"):
                for k in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy", "healthCheckNodePort"):
                    if not spec.get(k) and old_spec.get(k):
                        spec[k] = copy.deepcopy(old_spec[k])
                old_ports = {(p.get("port"), p.get("protocol")): p.get("nodePort") for p in old_spec.get("ports") or []}
                for p in spec.get("ports") or []:
                    if not p.get("nodePort") and old_ports.get((p.get("port"), p.get("protocol"))):
                        p["nodePort"] = old_ports[(p.get("port"), p.get("protocol"))]
            if old_spec.get("clusterIP") and spec.get("clusterIP") and spec["clusterIP"] != old_spec["clusterIP"]:
                raise errors.invalid(rt, svc["metadata"]["name"], [
                    ("spec.clusterIPs[0]", f'Invalid value: []string{{"{spec["clusterIP"]}"}}: may not change once set')])
            self._allocate(svc)
            return
        wanted = spec.get("clusterIP")
        if wanted and wanted != "None" and wanted in self._used("clusterIP"):
            raise errors.invalid(rt, svc["metadata"].get("name", ""), [
                ("spec.clusterIPs", f'Invalid value: []string{{"{wanted}"}}: failed to allocate IP {wanted}: '
                                    "provided IP is already allocated")])
        self._allocate(svc)
        svc["status"] = {"loadBalancer": {}}

    def _allocate(self, svc: dict) -> None:
        spec = svc["spec"]
        if spec.get("type") == "ExternalName":
            return
        ip = spec.get("clusterIP") or ((spec.get("clusterIPs") or [None])[0])
        if not ip:
            ip = self._free_ip()
        spec["clusterIP"] = ip
        spec["clusterIPs"] = [ip]
        spec.setdefault("ipFamilies", ["IPv4"])
        if not spec.get("ipFamilyPolicy"):
            headless_without_selector = ip == "None" and not spec.get("selector")
            spec["ipFamilyPolicy"] = "RequireDualStack" if headless_without_selector else "SingleStack"
        if spec.get("type") in ("NodePort", "LoadBalancer"):
            used = self._used("nodePort")
            for p in spec.get("ports") or []:
                if not p.get("nodePort"):
                    p["nodePort"] = self._pick(lambda: random.randint(*NODE_PORTS), used)

    def _used(self, what: str) -> set:
        items, _ = self.store.list(self.registry.get("", "services"))
        if what == "nodePort":
            return {p.get("nodePort") for s in items for p in (s.get("spec") or {}).get("ports") or []}
        return {ip for s in items for ip in (s.get("spec") or {}).get("clusterIPs") or [(s.get("spec") or {}).get("clusterIP")]}

    def _free_ip(self) -> str:
        used = self._used("clusterIP")
        first, size = int(self.network.network_address), self.network.num_addresses
        # .1 is the `kubernetes` Service's; the network and broadcast addresses are never given.
        return self._pick(lambda: str(ipaddress.ip_address(first + random.randint(2, size - 2))), used)

    @staticmethod
    def _pick(draw, used: set):
        for _ in range(1000):
            value = draw()
            if value not in used:
                return value
        raise errors.internal("the service range is full")

    def _namespaces(self, op: str, ns: dict, old: dict | None) -> None:
        if op == "CREATE":
            ns.setdefault("spec", {})["finalizers"] = ["kubernetes"]
            ns["status"] = {"phase": "Active"}
        elif old is not None:
            # The finalizers belong to the namespace controller (the finalize subresource).
            ns.setdefault("spec", {})["finalizers"] = copy.deepcopy((old.get("spec") or {}).get("finalizers") or [])

    def _secrets(self, op: str, secret: dict, old: dict | None) -> None:
        if op == "UPDATE" and old is not None and old.get("type") and secret.get("type") != old.get("type"):
            raise errors.invalid(self.registry.get("", "secrets"), secret["metadata"]["name"],
                                 [("type", f'Invalid value: "{secret.get("type")}": field is immutable')])
