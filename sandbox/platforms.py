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
datasciencepipelinesapplications/api), oauth-proxy on 2.x (pipelines_api/server.py). Kueue
(v0.11.6's API and behaviour) and the KFP API server's acceptance are the same in both profiles
today; docs/sandbox.md says what that leaves out.
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


PLATFORMS = {
    "rhoai-3.3": Platform("rhoai-3.3", "3.3", "kuberay", "ray.io/authentication-resources", "kube-rbac-proxy",
                          "kube-rbac-proxy"),
    "rhoai-2.25": Platform("rhoai-2.25", "2.25", "codeflare", "ray.openshift.ai/oauth-finalizer", "oauth-proxy",
                           "oauth-proxy"),
}
DEFAULT_PLATFORM = "rhoai-3.3"


def platform(name: str | None) -> Platform:
    """The profile named `name` (None: the default); a clear error for an unknown one."""
    key = name or DEFAULT_PLATFORM
    if key not in PLATFORMS:
        raise ValueError(f"unknown platform {key!r}; the sandbox plays: {', '.join(PLATFORMS)}")
    return PLATFORMS[key]
