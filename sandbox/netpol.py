"""NetworkPolicies (networking.k8s.io/v1): the ones RHOAI 3.x's KubeRay makes for a RayCluster,
and the ingress check the sandbox's kube-proxy applies to the connections it relays.

KubeRay (red-hat-data-services/kuberay rhoai-3.3 @ 2572dfa, ray-operator/controllers/ray/
networkpolicy_controller.go): for a cluster annotated `odh.ray.io/secure-trusted-network: "true"`
(its webhook sets it on every RayCluster) `<name>-head` lets into the head: the cluster's own
pods (any port); any pod of the namespace on 10001 (client) and 8265 (dashboard); the
kuberay-operator's pods (app.kubernetes.io/name=kuberay in redhat-ods-applications) on 8265 and
10001; openshift-ingress (the gateway) on 8265; a RayJob's submitter pods (any port); and anyone
on 8443 (kube-rbac-proxy). `<name>-workers` lets into the workers only the cluster's own pods.

Enforcement, as far as loopback allows: a pod that is selected by an Ingress policy accepts only
what a rule allows (networking/v1 semantics: rules of all selecting policies are or-ed; a peer's
podSelector is in the policy's namespace unless a namespaceSelector is given). On OVN-Kubernetes
a denied packet is dropped, so the client's connect hangs until it times out; the kube-proxy
holds such a connection unanswered. It can judge only a connection whose source address is a
pod's: a process that does not bind its pod's address connects from 127.0.0.1 and is let through.
"""

from __future__ import annotations

from .apiserver.selectors import selector_matches

HEAD_PORTS = (10001, 8265)  # client, dashboard
KUBERAY_NAMESPACES = ["redhat-ods-applications"]  # APPLICATION_NAMESPACE on RHOAI
GATEWAY_NAMESPACE = "openshift-ingress"
PROXY_PORT = 8443
METADATA_NAME = "kubernetes.io/metadata.name"


def _tcp(*ports: int) -> list[dict]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def _labels(rc: dict) -> dict:
    return {"ray.io/cluster": rc["metadata"]["name"], "app.kubernetes.io/name": "kuberay",
            "app.kubernetes.io/created-by": "kuberay-operator"}


def head_policy(rc: dict) -> dict:
    """buildHeadNetworkPolicy (no MONITORING_NAMESPACE; the gateway's namespace on OpenShift)."""
    name = rc["metadata"]["name"]
    ns_in = lambda values: {"matchExpressions": [{"key": METADATA_NAME, "operator": "In", "values": values}]}  # noqa: E731
    ingress = [
        {"from": [{"podSelector": {"matchLabels": {"ray.io/cluster": name}}}]},
        {"from": [{"podSelector": {}}], "ports": _tcp(*HEAD_PORTS)},
        {"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "kuberay"}},
                   "namespaceSelector": ns_in(KUBERAY_NAMESPACES)}], "ports": _tcp(8265, 10001)},
        {"from": [{"namespaceSelector": ns_in([GATEWAY_NAMESPACE])}], "ports": _tcp(8265)},
        {"ports": _tcp(PROXY_PORT)},
    ]
    job = next((o["name"] for o in rc["metadata"].get("ownerReferences") or [] if o.get("kind") == "RayJob"), None)
    if job:
        ingress.append({"from": [{"podSelector": {"matchLabels": {"batch.kubernetes.io/job-name": job}}}]})
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": f"{name}-head", "labels": _labels(rc)},
            "spec": {"podSelector": {"matchLabels": {"ray.io/cluster": name, "ray.io/node-type": "head"}},
                     "policyTypes": ["Ingress"], "ingress": ingress}}


def worker_policy(rc: dict) -> dict:
    """buildWorkerNetworkPolicy."""
    name = rc["metadata"]["name"]
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": f"{name}-workers", "labels": _labels(rc)},
            "spec": {"podSelector": {"matchLabels": {"ray.io/cluster": name, "ray.io/node-type": "worker"}},
                     "policyTypes": ["Ingress"],
                     "ingress": [{"from": [{"podSelector": {"matchLabels": {"ray.io/cluster": name}}}]}]}}


def selects(selector: dict | None, labels: dict) -> bool:
    """metav1.LabelSelector semantics: an empty selector selects everything."""
    return selector_matches(selector or {}, labels)


def _ingress(policy: dict) -> bool:
    spec = policy.get("spec") or {}
    return "Ingress" in (spec.get("policyTypes") or ["Ingress"])


def _port_matches(rule_ports, pod: dict, port: int) -> bool:
    if not rule_ports:
        return True
    named = {cp.get("name"): cp.get("containerPort") for c in (pod.get("spec") or {}).get("containers") or []
             for cp in c.get("ports") or [] if cp.get("name")}
    for p in rule_ports:
        if (p.get("protocol") or "TCP") != "TCP":
            continue
        want = p.get("port")
        if want is None:
            return True
        number = named.get(want) if isinstance(want, str) and not want.isdigit() else int(want)
        end = p.get("endPort") or number
        if number is not None and number <= port <= end:
            return True
    return False


def _peer_matches(peer: dict, policy_ns: str, source: dict, source_ns_labels: dict) -> bool:
    if "ipBlock" in peer:
        return False  # pod IPs here are loopback addresses no ipBlock of a real policy names
    src_ns = source["metadata"].get("namespace")
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], source_ns_labels):
            return False
    elif src_ns != policy_ns:
        return False
    return "podSelector" not in peer or selects(peer["podSelector"], source["metadata"].get("labels") or {})


def allowed(policies: list[dict], target: dict, port: int, source: dict, source_ns_labels: dict) -> bool:
    """Whether `source` (a pod) may connect to `target` (a pod of the policies' namespace) on
    `port` (the container port)."""
    labels = target["metadata"].get("labels") or {}
    selecting = [p for p in policies if _ingress(p) and selects((p.get("spec") or {}).get("podSelector"), labels)]
    if not selecting:
        return True
    for policy in selecting:
        ns = policy["metadata"]["namespace"]
        for rule in (policy.get("spec") or {}).get("ingress") or []:
            if not _port_matches(rule.get("ports"), target, port):
                continue
            peers = rule.get("from")
            if not peers or any(_peer_matches(p, ns, source, source_ns_labels) for p in peers):
                return True
    return False
