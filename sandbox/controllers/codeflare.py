"""RHOAI's CodeFlare operator for RayClusters (project-codeflare/codeflare-operator v1.16.0,
pkg/controllers/raycluster_webhook.go, raycluster_controller.go, support.go), as RHOAI
2.23-2.25 ship it beside KubeRay 1.4.0 (the `rhoai-2.25` platform; 3.x has no CodeFlare
operator: kuberay_rhoai.py plays what took its place).

Webhook (mraycluster/vraycluster.ray.openshift.ai, on create and update):
- annotation ray.openshift.ai/version; the head's `oauth-proxy` sidecar (port 8443, the
  operator's image and args), its `proxy-tls-secret` volume and serviceAccountName
  `<name>-oauth-proxy-<hash>`;
- mTLS: MY_POD_IP, RAY_USE_TLS=1 and RAY_TLS_* env on the Ray container of every group,
  the `create-cert` init container, the `ca-vol` / `server-cert` volumes and mounts;
- validation: `enableIngress: true` is refused.
The kubelet runs create-cert (podcerts.py), so the sandbox's Ray runs with that mTLS too.

Controller (driven by the KubeRay controller's pass, before KubeRay, so the service account
exists before KubeRay creates the head pod):
- finalizer `ray.openshift.ai/oauth-finalizer` on every RayCluster; on deletion it is
  removed after platform.finalizer_delay_s (the operator first deletes the cluster's
  ClusterRoleBinding), then the RayCluster and what it owns go;
- the CA secret `<name>-ca-secret-<hash>`, suspended or not;
- while not suspended: the dashboard Route `ray-dashboard-<name>`, the OAuth cookie secret
  `<name>-oauth-config-<hash>` and the ServiceAccount `<name>-oauth-proxy-<hash>`.
Names carry RCCUniqueName's hash because the webhook sets the version annotation.
Not modelled: the OAuth Service and its serving-cert secret, the ClusterRoleBinding, the
Ray client Route and the NetworkPolicies. The Route is plain http to the head Service's
dashboard port (no OAuth proxy or TLS in front of it).
"""

from __future__ import annotations

import base64
import hashlib
import json

from ..apiserver import errors
from ..apiserver.store import now_rfc3339
from ..certs import ca_secret_data
from .base import owner_ref
from .rayplatform import RayPlatform

OPERATOR_VERSION = "v1.16.0"
CONTROLLER_NAME = "codeflare-raycluster-controller"
FINALIZER = "ray.openshift.ai/oauth-finalizer"
VERSION_ANNOTATION = "ray.openshift.ai/version"
CLUSTER_LABEL = "ray.openshift.ai/cluster-name"
OAUTH_CONTAINER = "oauth-proxy"
OAUTH_VOLUME = "proxy-tls-secret"
INIT_CONTAINER = "create-cert"
WEBHOOK = "vraycluster.ray.openshift.ai"
# support.go defaults (OAUTH_PROXY_IMAGE / CERT_GENERATOR_IMAGE unset)
OAUTH_PROXY_IMAGE = ("registry.redhat.io/openshift4/ose-oauth-proxy@sha256:"
                     "1ea6a01bf3e63cdcf125c6064cbd4a4a270deaf0f157b3eabb78f60556840366")
CERT_GENERATOR_IMAGE = "registry.redhat.io/ubi9@sha256:770cf07083e1c85ae69c25181a205b7cdef63c11b794c89b3b487d4670b4c328"
INGRESS_DOMAIN = "apps.sandbox.local"


def unique_name(s: str) -> str:
    """RCCUniqueName: s + "-" + the first 8 hex of sha256(controller name + s)."""
    return f"{s}-{hashlib.sha256((CONTROLLER_NAME + s).encode()).hexdigest()[:8]}"


def _new_names(rc: dict) -> bool:
    return VERSION_ANNOTATION in (rc["metadata"].get("annotations") or {})


def _object_name(rc: dict, suffix: str) -> str:
    """`<name>-<suffix>`, hashed as v1.16's RCCUniqueName when the webhook versioned the cluster."""
    base = f"{rc['metadata']['name']}-{suffix}"
    return unique_name(base) if _new_names(rc) else base


def oauth_sa_name(rc: dict) -> str:
    return _object_name(rc, "oauth-proxy")


def oauth_secret_name(rc: dict) -> str:
    return _object_name(rc, "oauth-config")


def oauth_tls_secret_name(rc: dict) -> str:
    return _object_name(rc, "proxy-tls-secret")


def ca_secret_name(rc: dict) -> str:
    name = rc["metadata"]["name"]
    return unique_name(f"{name}-ca-secret") if _new_names(rc) else f"ca-secret-{name}"


def oauth_proxy_container(rc: dict) -> dict:
    ns = rc["metadata"]["namespace"]
    delegate = json.dumps({"/": {"resource": "pods", "namespace": ns, "verb": "get"}}, separators=(",", ":"))
    return {
        "name": OAUTH_CONTAINER, "image": OAUTH_PROXY_IMAGE,
        "ports": [{"containerPort": 8443, "name": "oauth-proxy"}],
        "env": [{"name": "COOKIE_SECRET", "valueFrom": {"secretKeyRef": {"name": oauth_secret_name(rc),
                                                                         "key": "cookie_secret"}}}],
        "args": ["--https-address=:8443", "--provider=openshift",
                 f"--openshift-service-account={oauth_sa_name(rc)}", "--upstream=http://localhost:8265",
                 "--tls-cert=/etc/tls/private/tls.crt", "--tls-key=/etc/tls/private/tls.key",
                 "--cookie-secret=$(COOKIE_SECRET)", f"--openshift-delegate-urls={delegate}"],
        "volumeMounts": [{"name": OAUTH_VOLUME, "mountPath": "/etc/tls/private", "readOnly": True}],
    }


def tls_env() -> list[dict]:
    return [{"name": "MY_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "RAY_USE_TLS", "value": "1"},
            {"name": "RAY_TLS_SERVER_CERT", "value": "/home/ray/workspace/tls/server.crt"},
            {"name": "RAY_TLS_SERVER_KEY", "value": "/home/ray/workspace/tls/server.key"},
            {"name": "RAY_TLS_CA_CERT", "value": "/home/ray/workspace/tls/ca.crt"}]


def cert_mounts() -> list[dict]:
    return [{"name": "ca-vol", "mountPath": "/home/ray/workspace/ca", "readOnly": True},
            {"name": "server-cert", "mountPath": "/home/ray/workspace/tls", "readOnly": False}]


def ca_volumes(rc: dict) -> list[dict]:
    return [{"name": "ca-vol", "secret": {"secretName": ca_secret_name(rc)}},
            {"name": "server-cert", "emptyDir": {}}]


_CERT_SCRIPT = ("cd /home/ray/workspace/tls && openssl req -nodes -newkey rsa:2048 -keyout server.key -out server.csr "
                "-subj '/CN=ray-head' && printf \"authorityKeyIdentifier=keyid,issuer\\nbasicConstraints=CA:FALSE\\n"
                "subjectAltName = @alt_names\\n[alt_names]\\nDNS.1 = 127.0.0.1\\nDNS.2 = localhost\\nDNS.3 = ${FQ_RAY_IP}"
                "\\nDNS.4 = $(awk 'END{print $1}' /etc/hosts)")
_CERT_TAIL = ("\">./domain.ext && cp /home/ray/workspace/ca/* . && openssl x509 -req -CA ca.crt -CAkey ca.key "
              "-in server.csr -out server.crt -days 365 -CAcreateserial -extfile domain.ext")


def head_init_container(rc: dict) -> dict:
    ns, name = rc["metadata"]["namespace"], rc["metadata"]["name"]
    route = f"rayclient-{name}-{ns}.{INGRESS_DOMAIN}"
    svc = f"{name}-head-svc.{ns}.svc"
    script = f"{_CERT_SCRIPT}\\nDNS.5 = {route}\\nDNS.6 = {svc}{_CERT_TAIL}"
    return {"name": INIT_CONTAINER, "image": CERT_GENERATOR_IMAGE, "command": ["sh", "-c", script],
            "volumeMounts": cert_mounts()}


def worker_init_container() -> dict:
    return {"name": INIT_CONTAINER, "image": CERT_GENERATOR_IMAGE, "command": ["sh", "-c", _CERT_SCRIPT + _CERT_TAIL],
            "volumeMounts": cert_mounts()}


def _upsert(items: list | None, item: dict) -> list:
    """support.go upsert: replace the entry with the same name, else append."""
    out = list(items or [])
    for i, existing in enumerate(out):
        if existing.get("name") == item["name"]:
            out[i] = item
            return out
    return out + [item]


def _mutate_group(spec: dict, init: dict, rc: dict) -> None:
    containers = spec.get("containers") or []
    if containers:
        ray = containers[0]
        for env in tls_env():
            ray["env"] = _upsert(ray.get("env"), env)
        for mount in cert_mounts():
            ray["volumeMounts"] = _upsert(ray.get("volumeMounts"), mount)
    spec["initContainers"] = _upsert(spec.get("initContainers"), init)
    for vol in ca_volumes(rc):
        spec["volumes"] = _upsert(spec.get("volumes"), vol)


class CodeFlareOperator(RayPlatform):
    """The CodeFlare operator's RayCluster webhook and controller."""

    def __init__(self, store, registry, faults):
        super().__init__(store, registry, faults)
        self.route_t = registry.get("route.openshift.io", "routes")

    # --- webhook -----------------------------------------------------------------
    def admission(self, op: str, rt, obj: dict, old: dict | None) -> None:
        if rt.key != ("ray.io", "rayclusters") or op not in ("CREATE", "UPDATE"):
            return
        self.default(obj)
        if op == "UPDATE" and obj["metadata"].get("deletionTimestamp"):
            return  # "Object is being deleted, skip validations"
        head = (obj.get("spec") or {}).get("headGroupSpec") or {}
        if head.get("enableIngress"):
            raise errors.webhook_denied(WEBHOOK, "spec.headGroupSpec.enableIngress: Invalid value: true: "
                                                 "RayCluster with enableIngress set to true is not allowed")

    def default(self, rc: dict) -> None:
        """rayClusterWebhook.Default (OAuth and mTLS both enabled, as RHOAI configures them)."""
        meta = rc.setdefault("metadata", {})
        meta.setdefault("annotations", {})[VERSION_ANNOTATION] = OPERATOR_VERSION
        spec = rc.setdefault("spec", {})
        head = spec.setdefault("headGroupSpec", {}).setdefault("template", {}).setdefault("spec", {})
        head["containers"] = _upsert(head.get("containers"), oauth_proxy_container(rc))
        head["volumes"] = _upsert(head.get("volumes"), {"name": OAUTH_VOLUME,
                                                        "secret": {"secretName": oauth_tls_secret_name(rc)}})
        head["serviceAccountName"] = oauth_sa_name(rc)
        _mutate_group(head, head_init_container(rc), rc)
        for group in spec.get("workerGroupSpecs") or []:
            _mutate_group(group.setdefault("template", {}).setdefault("spec", {}), worker_init_container(), rc)

    # --- controller --------------------------------------------------------------
    def reconcile(self, rc: dict) -> dict | None:
        """One pass for one RayCluster; returns it as it is now (None once gone)."""
        meta = rc["metadata"]
        uid, ns, name = meta["uid"], meta["namespace"], meta["name"]
        if not meta.get("deletionTimestamp"):
            if FINALIZER not in (meta.get("finalizers") or []):
                rc = self.store.mutate(self.rc_t, ns, name, lambda o: o["metadata"].setdefault("finalizers", []).append(FINALIZER))
                if rc is None:
                    return None
        elif FINALIZER in (meta.get("finalizers") or []):
            return self._drop_finalizer(rc, FINALIZER) if self._finalizer_due(rc) else rc
        if rc is None or rc["metadata"].get("deletionTimestamp"):
            return rc
        labels = {CLUSTER_LABEL: name}
        self._ensure(self.secret_t, rc, ca_secret_name(rc), labels=labels, body=lambda: {
            "type": "Opaque", "data": ca_secret_data()})
        if not (rc.get("spec") or {}).get("suspend"):
            self._ensure_route(rc)
            cookie = base64.b64encode(hashlib.sha1((name + uid).encode()).digest()).decode()
            self._ensure(self.secret_t, rc, oauth_secret_name(rc), labels=labels, body=lambda: {
                "type": "Opaque", "data": {"cookie_secret": base64.b64encode(cookie.encode()).decode()}})
            route = f"ray-dashboard-{name}"
            self._ensure(self.sa_t, rc, oauth_sa_name(rc), dict, labels=labels, annotations={
                "serviceaccounts.openshift.io/oauth-redirectreference.first":
                    '{"kind":"OAuthRedirectReference","apiVersion":"v1","reference":{"kind":"Route","name":"' + route + '"}}'})
        return rc

    # pod_gate and mutate_pod: none (2.x's KubeRay v1.4.0 creates pods at once; the webhook shaped them)

    def _ensure_route(self, rc: dict) -> None:
        ns, name = rc["metadata"]["namespace"], rc["metadata"]["name"]
        if self.store.find(self.route_t, ns, f"ray-dashboard-{name}") is not None:
            return
        svc = self.store.find(self.svc_t, ns, f"{name}-head-svc")
        if svc is None:
            return  # KubeRay has not made the head Service yet: next pass
        ip = svc["spec"].get("clusterIP")
        port = next((p["port"] for p in svc["spec"].get("ports") or [] if p.get("name") == "dashboard"), 8265)
        if not ip or ip == "None":  # headless: the route's router would reach the head pod
            return
        self._create(self.route_t, {
            "metadata": {"name": f"ray-dashboard-{name}", "namespace": ns, "labels": {CLUSTER_LABEL: name},
                         "ownerReferences": [owner_ref(rc)]},
            "spec": {"host": f"{ip}:{port}", "to": {"kind": "Service", "name": f"{name}-head-svc", "weight": 100},
                     "port": {"targetPort": "dashboard"}, "wildcardPolicy": "None"},
            "status": {"ingress": [{"host": f"{ip}:{port}", "routerName": "default", "wildcardPolicy": "None",
                                    "conditions": [{"type": "Admitted", "status": "True",
                                                    "lastTransitionTime": now_rfc3339()}]}]}})
