"""What Red Hat's KubeRay build adds on OpenShift AI 3.x, where no CodeFlare operator runs
(red-hat-data-services/kuberay rhoai-3.3 @ 2572dfa; KubeRay v1.4.2 code, shipped as v1.4.4):

Mutating webhook `mraycluster.kb.io` (pkg/webhooks/v1/raycluster_mutating_webhook.go,
failurePolicy Fail, CREATE and UPDATE of every RayCluster): annotation
`odh.ray.io/secure-trusted-network: "true"` (overwriting a user's "false") and
`spec.headGroupSpec.enableIngress: false`. The RayCluster a RayJob creates goes through it too.

Authentication controller (controllers/ray/authentication_controller.go), for annotated clusters,
suspended or not: finalizer `ray.io/authentication-resources`; ServiceAccount
`<name>-oauth-proxy-sa`; ReferenceGrant `kuberay-gateway-access` (one per namespace, no owner);
HTTPRoute `<ns>-<name>` in the platform namespace on `openshift-ingress/data-science-gateway`
(path /ray/<ns>/<name> to the head Service's port 8265); ConfigMap
`kube-rbac-proxy-config-<name>` (the sidecar's SubjectAccessReview: get services
<name>-head-svc); then condition AuthenticationReady (observedGeneration). On deletion it
removes those (the grant only when no other annotated cluster is left) and the finalizer.

mTLS controller (controllers/ray/raycluster_mtls_controller.go), no finalizer: cert-manager
Issuers and Certificates, whose secrets the sandbox writes at once as cert-manager would: the CA
`<name>-ca-secret-<uid[:8]>` (tls.crt, tls.key, ca.crt; labelled ray.openshift.ai/cluster-name),
`ray-head-secret-<name>` and `ray-worker-secret-<name>` (the cluster's pod IPs and 127.0.0.1 as
IP SANs, reissued as pods get addresses). Gone with the cluster (owner references; the secrets
by the controller's cleanup).

RayCluster controller changes (raycluster_controller.go): no pod before both TLS secrets hold
tls.crt, tls.key and ca.crt ("mTLS secrets not ready"); no head pod before AuthenticationReady is
True for the current generation (event WaitingForAuthentication); every container and init
container of a pod gets RAY_USE_TLS=1, RAY_TLS_* and the `ray-tls-vol` secret volume at
/home/ray/workspace/tls (the head also MY_POD_IP); then the head gets the `kube-rbac-proxy`
sidecar (8443 -> 127.0.0.1:8265) and its serviceAccountName becomes `<name>-oauth-proxy-sa`.
Pods are created by generateName (`<name>-head-xxxxx`): select them by labels.

Not modelled: the NetworkPolicies (the sandbox enforces none), the Issuer and Certificate objects
themselves (their secrets are what pods and clients read), certificate renewal.
"""

from __future__ import annotations

import base64
import ipaddress

from .. import netpol
from ..apiserver import errors
from ..certs import ca_keypair, issue
from .base import log, set_condition
from .rayplatform import RayPlatform

ANNOTATION = "odh.ray.io/secure-trusted-network"
FINALIZER = "ray.io/authentication-resources"
CLUSTER_LABEL = "ray.openshift.ai/cluster-name"  # on the CA secret (Certificate secretTemplate)
AUTH_CONDITION = "AuthenticationReady"
SIDECAR = "kube-rbac-proxy"
# RELATED_IMAGE_ODH_KUBE_RBAC_PROXY_IMAGE, from config/openshift/params.env
SIDECAR_IMAGE = "quay.io/opendatahub/odh-kube-rbac-proxy:odh-stable"
TLS_VOLUME = "ray-tls-vol"
TLS_DIR = "/home/ray/workspace/tls"
PLATFORM_NAMESPACE = "redhat-ods-applications"  # utils.GetPlatformNamespace's fallback on OpenShift
GATEWAY_NAMESPACE, GATEWAY_NAME = "openshift-ingress", "data-science-gateway"
REFERENCE_GRANT = "kuberay-gateway-access"


def enabled(rc: dict) -> bool:
    return (rc["metadata"].get("annotations") or {}).get(ANNOTATION) == "true"


def ca_secret_name(rc: dict) -> str:
    return f"{rc['metadata']['name']}-ca-secret-{rc['metadata']['uid'][:8]}"


def head_secret_name(name: str) -> str:
    return f"ray-head-secret-{name}"


def worker_secret_name(name: str) -> str:
    return f"ray-worker-secret-{name}"


def service_account_name(name: str) -> str:
    return f"{name}-oauth-proxy-sa"


def config_map_name(name: str) -> str:
    return f"kube-rbac-proxy-config-{name}"


def http_route_name(ns: str, name: str) -> str:
    """utils.GenerateDNS1123Name("<ns>-<name>"): as is up to 63 characters, else cut with a hash."""
    import hashlib

    full = f"{ns}-{name}"
    if len(full) <= 63:
        return full
    return f"{full[:52].rstrip('-')}-{hashlib.sha256(full.encode()).hexdigest()[:10]}"


def tls_env(head: bool) -> list[dict]:
    env = [{"name": "MY_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}] if head else []
    return env + [{"name": "RAY_USE_TLS", "value": "1"},
                  {"name": "RAY_TLS_SERVER_CERT", "value": f"{TLS_DIR}/tls.crt"},
                  {"name": "RAY_TLS_SERVER_KEY", "value": f"{TLS_DIR}/tls.key"},
                  {"name": "RAY_TLS_CA_CERT", "value": f"{TLS_DIR}/ca.crt"}]


def sidecar(name: str) -> dict:
    """GetOIDCProxySidecar."""
    return {"name": SIDECAR, "image": SIDECAR_IMAGE, "imagePullPolicy": "IfNotPresent",
            "ports": [{"containerPort": 8443, "name": "https", "protocol": "TCP"}],
            "args": ["--secure-listen-address=0.0.0.0:8443", "--upstream=http://127.0.0.1:8265/",
                     "--config-file=/etc/kube-rbac-proxy/config.yaml", "--logtostderr=true"],
            "volumeMounts": [{"name": config_map_name(name), "mountPath": "/etc/kube-rbac-proxy/", "readOnly": True}],
            "resources": {"requests": {"cpu": "10m", "memory": "20Mi"}, "limits": {"cpu": "200m", "memory": "100Mi"}}}


class RhoaiKubeRay(RayPlatform):
    """The webhook and the authentication and mTLS controllers of RHOAI 3.x's KubeRay, called
    from the RayCluster controller's pass (kuberay.py) as the `platform` hooks."""

    def __init__(self, store, registry, faults):
        super().__init__(store, registry, faults)
        self.cm_t = registry.get("", "configmaps")
        self.pod_t = registry.get("", "pods")
        self.route_t = registry.get("gateway.networking.k8s.io", "httproutes")
        self.grant_t = registry.get("gateway.networking.k8s.io", "referencegrants")
        self.netpol_t = registry.get("networking.k8s.io", "networkpolicies")
        self._clusters: dict[str, tuple[str, str]] = {}  # uid -> (ns, name), for the mTLS cleanup once gone
        self._issued: dict[str, tuple] = {}  # secret (ns/name) -> the SANs its certificate was issued for

    # --- webhook -----------------------------------------------------------------
    def admission(self, op: str, rt, obj: dict, old: dict | None) -> None:
        if rt.key != ("ray.io", "rayclusters") or op not in ("CREATE", "UPDATE"):
            return
        obj.setdefault("metadata", {}).setdefault("annotations", {})[ANNOTATION] = "true"
        obj.setdefault("spec", {}).setdefault("headGroupSpec", {})["enableIngress"] = False

    # --- the controllers' pass -----------------------------------------------------
    def reconcile(self, rc: dict) -> dict | None:
        meta = rc["metadata"]
        uid, ns, name = meta["uid"], meta["namespace"], meta["name"]
        self._clusters[uid] = (ns, name)
        if meta.get("deletionTimestamp"):
            return self._finalize(rc)
        if not enabled(rc):
            return self._set_auth(rc, "True", "AuthenticationDisabled", "Authentication not enabled for this cluster")
        if FINALIZER not in (meta.get("finalizers") or []):
            rc = self.store.mutate(self.rc_t, ns, name, lambda o: o["metadata"].setdefault("finalizers", []).append(FINALIZER))
            if rc is None:
                return None
        self._ensure(self.sa_t, rc, service_account_name(name), dict)
        self._ensure_grant(ns)
        self._ensure_route(rc)
        self._ensure(self.cm_t, rc, config_map_name(name), lambda: {"data": {"config.yaml": (
            "authorization:\n  resourceAttributes:\n    verb: \"get\"\n    resource: \"services\"\n"
            f"    apiGroup: \"\"\n    resourceName: \"{name}-head-svc\"\n")}}, labels={"app": "kube-rbac-proxy"})
        rc = self._set_auth(rc, "True", "AuthenticationResourcesCreated",
                            "Authentication resources created successfully (mode: IntegratedOAuth)")
        if rc is not None:
            self._ensure_certificates(rc)
            self._ensure_network_policies(rc)
        return rc

    def _ensure_network_policies(self, rc: dict) -> None:
        """networkpolicy_controller.go: `<name>-head` and `<name>-workers` (sandbox/netpol.py)."""
        for policy in (netpol.head_policy(rc), netpol.worker_policy(rc)):
            meta = policy.pop("metadata")
            self._ensure(self.netpol_t, rc, meta["name"], lambda p=policy: p, labels=meta["labels"])

    def forget(self, live_uids: set[str]) -> None:
        """cleanupMTLSResources for clusters that are gone: their TLS secrets (the CA's too)."""
        super().forget(live_uids)
        for uid in [u for u in self._clusters if u not in live_uids]:
            ns, name = self._clusters.pop(uid)
            doomed = [head_secret_name(name), worker_secret_name(name)]
            doomed += [s["metadata"]["name"] for s in self.store.list(self.secret_t, ns)[0]
                       if (s["metadata"].get("labels") or {}).get(CLUSTER_LABEL) == name
                       and s["metadata"]["name"].startswith(f"{name}-ca-secret-")]
            for secret in doomed:
                self._issued.pop(f"{ns}/{secret}", None)
                try:
                    self.store.delete(self.secret_t, ns, secret)
                except errors.ApiError:
                    pass

    # --- the RayCluster controller's part --------------------------------------------
    def pod_gate(self, rc: dict, node_type: str | None) -> str | None:
        """Why KubeRay creates no pod yet (its reconcile error), or None. `node_type` None:
        any pod (reconcilePods' checkMTLSSecretsReady); "head": the head (createHeadPod's wait
        for AuthenticationReady of the current generation)."""
        if not enabled(rc):
            return None
        name, ns = rc["metadata"]["name"], rc["metadata"]["namespace"]
        if node_type is None:
            for secret in (head_secret_name(name), worker_secret_name(name)):
                data = (self.store.find(self.secret_t, ns, secret) or {}).get("data") or {}
                if not all(data.get(k) for k in ("tls.crt", "tls.key", "ca.crt")):
                    return f"mTLS secrets not ready: secret {ns}/{secret} is missing or incomplete"
            return None
        if node_type == "head":
            cond = next((c for c in (rc.get("status") or {}).get("conditions") or [] if c["type"] == AUTH_CONDITION), None)
            if not cond or cond["status"] != "True" or cond.get("observedGeneration") != rc["metadata"].get("generation"):
                return "WaitingForAuthentication"
        return None

    def mutate_pod(self, rc: dict, spec: dict, node_type: str) -> None:
        """configureMTLSForPod, then (head) the kube-rbac-proxy sidecar and its service account."""
        if not enabled(rc):
            return
        name = rc["metadata"]["name"]
        head = node_type == "head"
        secret = head_secret_name(name) if head else worker_secret_name(name)
        for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            c["env"] = list(c.get("env") or []) + tls_env(head)
            c["volumeMounts"] = list(c.get("volumeMounts") or []) + [
                {"name": TLS_VOLUME, "mountPath": TLS_DIR, "readOnly": True}]
        spec["volumes"] = list(spec.get("volumes") or []) + [{"name": TLS_VOLUME, "secret": {"secretName": secret}}]
        if head:
            spec["containers"] = list(spec.get("containers") or []) + [sidecar(name)]
            spec["volumes"].append({"name": config_map_name(name), "configMap": {"name": config_map_name(name)}})
            spec["serviceAccountName"] = service_account_name(name)

    # --- authentication ----------------------------------------------------------------
    def _set_auth(self, rc: dict, status: str, reason: str, message: str) -> dict | None:
        gen = rc["metadata"].get("generation")
        cond = next((c for c in (rc.get("status") or {}).get("conditions") or [] if c["type"] == AUTH_CONDITION), None)
        if cond and (cond["status"], cond["reason"], cond.get("observedGeneration")) == (status, reason, gen):
            return rc

        def fn(o):
            st = o.setdefault("status", {})
            st["conditions"] = set_condition(st.get("conditions") or [], AUTH_CONDITION, status, reason, message, gen)
        return self.store.mutate(self.rc_t, rc["metadata"]["namespace"], rc["metadata"]["name"], fn, subresource="status")

    def _finalize(self, rc: dict) -> dict | None:
        meta = rc["metadata"]
        if FINALIZER not in (meta.get("finalizers") or []):
            return rc
        if not self._finalizer_due(rc):
            return rc
        ns, name = meta["namespace"], meta["name"]
        others = [o for o in self.store.list(self.rc_t, ns)[0] if o["metadata"]["uid"] != meta["uid"] and enabled(o)]
        doomed = [(self.route_t, PLATFORM_NAMESPACE, http_route_name(ns, name)), (self.cm_t, ns, config_map_name(name)),
                  (self.sa_t, ns, service_account_name(name))]
        if not others:
            doomed.insert(0, (self.grant_t, ns, REFERENCE_GRANT))
        for rt, where, what in doomed:  # cleanupOIDCResources: errors are logged, never block the finalizer
            try:
                self.store.delete(rt, where, what)
            except errors.ApiError as exc:
                if exc.code != 404:
                    log.info("kuberay auth: deleting %s %s/%s failed: %s", rt.kind, where, what, exc.message)

        return self._drop_finalizer(rc, FINALIZER)

    def _ensure_grant(self, ns: str) -> None:
        if self.store.find(self.grant_t, ns, REFERENCE_GRANT) is not None:
            return
        self._create(self.grant_t, {
            "apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
            "metadata": {"name": REFERENCE_GRANT, "namespace": ns,
                         "labels": {"app.kubernetes.io/managed-by": "kuberay-operator",
                                    "app.kubernetes.io/component": "gateway-access"}},
            "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": PLATFORM_NAMESPACE}],
                     "to": [{"group": "", "kind": "Service"}]}})

    def _ensure_route(self, rc: dict) -> None:
        ns, name = rc["metadata"]["namespace"], rc["metadata"]["name"]
        route = http_route_name(ns, name)
        if self.store.find(self.route_t, PLATFORM_NAMESPACE, route) is not None:
            return
        svc = (((rc.get("spec") or {}).get("headGroupSpec") or {}).get("headService") or {}).get("metadata", {}).get("name") \
            or f"{name}-head-svc"
        path = f"/ray/{ns}/{name}"
        self._create(self.route_t, {
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": route, "namespace": PLATFORM_NAMESPACE,
                         "labels": {"ray.io/cluster-namespace": ns, "ray.io/cluster-name": name, "ray.io/cluster": name}},
            "spec": {"parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": GATEWAY_NAME,
                                     "namespace": GATEWAY_NAMESPACE}],
                     "rules": [{"matches": [{"path": {"type": "Exact", "value": path}}],
                                "filters": [{"type": "RequestRedirect", "requestRedirect": {
                                    "path": {"type": "ReplaceFullPath", "replaceFullPath": f"{path}/#/"}, "statusCode": 302}}]},
                               {"matches": [{"path": {"type": "PathPrefix", "value": path}}],
                                "filters": [{"type": "URLRewrite", "urlRewrite": {
                                    "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}],
                                "backendRefs": [{"group": "", "kind": "Service", "name": svc, "namespace": ns,
                                                 "port": 8265, "weight": 1}]}]}})

    # --- mTLS (cert-manager's secrets) ---------------------------------------------------
    def _ensure_certificates(self, rc: dict) -> None:
        ns, name = rc["metadata"]["namespace"], rc["metadata"]["name"]
        ca_name = ca_secret_name(rc)
        ca = self.store.find(self.secret_t, ns, ca_name)
        if ca is None:
            cert, key = ca_keypair(f"ray-root-ca-{name}", days=3650)
            self._create(self.secret_t, {"type": "kubernetes.io/tls", "metadata": {
                "name": ca_name, "namespace": ns, "labels": {CLUSTER_LABEL: name},
                "annotations": {"cert-manager.io/certificate-name": f"ray-ca-certificate-{name}",
                                "cert-manager.io/issuer-name": f"ray-selfsigned-issuer-{name}"}},
                "data": {"tls.crt": _b64(cert), "tls.key": _b64(key), "ca.crt": _b64(cert)}})
            ca = self.store.find(self.secret_t, ns, ca_name)
            if ca is None:
                return
        ca_pem, ca_key = base64.b64decode(ca["data"]["ca.crt"]), base64.b64decode(ca["data"]["tls.key"])
        ips = self._ips(rc)
        svc = f"{name}-head-svc"
        head_dns = [svc, "localhost", f"{svc}.{ns}.svc", f"{svc}.{ns}.svc.cluster.local"]
        wsvc = f"{name}-worker-svc"
        worker_dns = [wsvc, "localhost", f"{wsvc}.{ns}.svc", f"{wsvc}.{ns}.svc.cluster.local"]
        for g in (rc.get("spec") or {}).get("workerGroupSpecs") or []:
            grp = f"{name}-{g.get('groupName', '')}"
            worker_dns += ["localhost", grp, f"{grp}.{ns}.svc", f"{grp}.{ns}.svc.cluster.local"]
        worker_dns += ["localhost", f"*.{wsvc}.{ns}.svc", f"*.{wsvc}.{ns}.svc.cluster.local",
                       f"*-worker-*.{ns}.svc", f"*-worker-*.{ns}.svc.cluster.local"]
        for secret, dns, role in ((head_secret_name(name), head_dns, "head"), (worker_secret_name(name), worker_dns, "worker")):
            self._issue(rc, secret, ca_pem, ca_key, dns, ips, role)

    def _ips(self, rc: dict) -> list[str]:
        """normalizeIPs(the cluster's pod IPs) + 127.0.0.1; here also the head Service's
        clusterIP, which the sandbox's Ray dials where KubeRay's dials its DNS name
        (docs/sandbox.md)."""
        ns, name = rc["metadata"]["namespace"], rc["metadata"]["name"]
        pods = self.store.list(self.pod_t, ns, lambda p: (p["metadata"].get("labels") or {}).get("ray.io/cluster") == name)[0]
        ips = [(p.get("status") or {}).get("podIP") for p in pods]
        svcs = self.store.list(self.svc_t, ns, lambda s: (s["metadata"].get("labels") or {}).get("ray.io/cluster") == name)[0]
        ips += [s["spec"].get("clusterIP") for s in svcs]
        valid = []
        for ip in ips:
            try:
                ipaddress.ip_address(ip or "")
            except ValueError:
                continue
            valid.append(ip)
        return sorted(set(valid)) + ["127.0.0.1"]

    def _issue(self, rc: dict, secret: str, ca_pem: bytes, ca_key: bytes, dns: list[str], ips: list[str], role: str) -> None:
        ns = rc["metadata"]["namespace"]
        key = f"{ns}/{secret}"
        want = (rc["metadata"]["uid"], tuple(dns), tuple(ips))
        existing = self.store.find(self.secret_t, ns, secret)
        if existing is not None and self._issued.get(key) == want:
            return
        # a reissue keeps the key (cert-manager's rotationPolicy Never): RSA key generation was a
        # fifth of a test worker's CPU, reissuing at each pod's address
        kept = ((existing or {}).get("data") or {}).get("tls.key")
        cert, pkey = issue(ca_pem, ca_key, None, dns, ips, days=90, key_pem=base64.b64decode(kept) if kept else None)
        data = {"tls.crt": _b64(cert), "tls.key": _b64(pkey), "ca.crt": _b64(ca_pem)}
        meta = {"name": secret, "namespace": ns,
                "annotations": {"cert-manager.io/certificate-name": f"ray-{role}-cert-{rc['metadata']['name']}",
                                "cert-manager.io/issuer-name": f"ray-ca-issuer-{rc['metadata']['name']}"}}
        if existing is None:
            self._create(self.secret_t, {"type": "kubernetes.io/tls", "metadata": meta, "data": data})
        else:
            def fn(o):
                o["data"] = data
            self.store.mutate(self.secret_t, ns, secret, fn)
        self._issued[key] = want


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()

