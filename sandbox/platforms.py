"""The OpenShift AI releases the sandbox plays (`kfp-ray-sandbox up --platform ...`).

Each profile names what that release runs for RayClusters, as read from the Red Hat forks'
`rhoai-X.Y` branches (../shared/reference/rhoai-facts.md, "RHOAI 3.x against 2.x"):

- rhoai-3.3 (the default: what kfp-ray's pins match): no CodeFlare operator. Red Hat's KubeRay
  build (red-hat-data-services/kuberay rhoai-3.3 @ 2572dfa, KubeRay v1.4.2 code shipped as
  v1.4.4) does what the operator did: a mutating webhook annotates every RayCluster
  `odh.ray.io/secure-trusted-network: "true"` and forces enableIngress false; its
  authentication controller (finalizer `ray.io/authentication-resources`, kube-rbac-proxy
  sidecar, HTTPRoute on data-science-gateway) and its mTLS controller (cert-manager
  certificates) act on annotated clusters (controllers/kuberay_rhoai.py).
- rhoai-2.25: the CodeFlare operator v1.16.0 (oauth-proxy sidecar, create-cert init
  containers, `ray.openshift.ai/oauth-finalizer`; controllers/codeflare.py) beside KubeRay
  v1.4.0, which has none of the controllers above (rhoai-2.25 @ 90c418d).

The DSPA route's proxy differs too: kube-rbac-proxy on 3.x (a SubjectAccessReview on
datasciencepipelinesapplications/api), oauth-proxy on 2.x (pipelines_api/server.py).

And Kueue (controllers/kueue.py), both serving kueue.x-k8s.io/v1beta1 only:
- rhoai-3.3: the Red Hat build of Kueue 1.1, upstream v0.12.10 (openshift/kueue-operator
  release-1.1 @ ba545a0, submodule upstream/kueue/src @ bd16703). Its operator scopes every
  namespaced Kueue webhook to namespaces labelled `kueue.openshift.io/managed=true`
  (pkg/webhook/pod_webhook.go), LocalQueueDefaulting is on (Beta in v0.12), and
  waitForPodsReady is off unless the administrator sets the Kueue CR's
  `gangScheduling.policy: ByWorkload` (pkg/configmap buildWaitForPodsReady).
- rhoai-2.25: Kueue v0.11.6 embedded (red-hat-data-services/kueue rhoai-2.25 @ ef371c8):
  webhooks in every namespace, no LocalQueueDefaulting, waitForPodsReady on (5 min).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Platform:
    name: str
    rhoai: str  # the release, as users name it
    ray_security: str  # who secures a RayCluster: "codeflare" (2.x) or "kuberay" (3.x)
    ray_finalizer: str  # the finalizer that holds a deleted RayCluster while its auth objects go
    head_sidecar: str  # the auth proxy container added to the Ray head
    pipelines_proxy: str  # the auth proxy in front of the DSPA's API route
    kueue: str  # the upstream Kueue version its Kueue runs
    kueue_opt_in: bool  # Kueue's webhooks only act in namespaces labelled kueue.openshift.io/managed=true
    queue_defaulting: bool  # LocalQueueDefaulting: a job without a queue label gets LocalQueue `default`
    wait_for_pods_ready: bool  # waitForPodsReady as the release configures it (a faults switch overrides it)


PLATFORMS = {
    "rhoai-3.3": Platform("rhoai-3.3", "3.3", "kuberay", "ray.io/authentication-resources", "kube-rbac-proxy",
                          "kube-rbac-proxy", kueue="v0.12.10", kueue_opt_in=True, queue_defaulting=True,
                          wait_for_pods_ready=False),
    "rhoai-2.25": Platform("rhoai-2.25", "2.25", "codeflare", "ray.openshift.ai/oauth-finalizer", "oauth-proxy",
                           "oauth-proxy", kueue="v0.11.6", kueue_opt_in=False, queue_defaulting=False,
                           wait_for_pods_ready=True),
}
DEFAULT_PLATFORM = "rhoai-3.3"


def platform(name: str | None) -> Platform:
    """The profile named `name` (None: the default); a clear error for an unknown one."""
    key = name or DEFAULT_PLATFORM
    if key not in PLATFORMS:
        raise ValueError(f"unknown platform {key!r}; the sandbox plays: {', '.join(PLATFORMS)}")
    return PLATFORMS[key]
