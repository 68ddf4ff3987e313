"""Kubernetes access, the same code path in a pipeline pod and on this machine.

In a RHOAI pipeline pod: the service account's token and CA bundle (TLS verified). Else:
$KUBECONFIG (or ~/.kube/config). One ApiClient is built and shared, also with the CodeFlare
SDK, whose own client would drop the kubeconfig's CA and TLS settings.

Every request has a connect and a read timeout (a half-open connection cannot hang a task),
and retries are ours alone, bounded and logged (urllib3's own are off: they would multiply
ours). 401 and 403 are never retried: they fail at once, naming who may not do what, and how
to fix it.
"""

from __future__ import annotations

import os
import re
import time
from functools import lru_cache
from pathlib import Path

from .errors import AccessDenied, KfpRayError
from .wait import retry

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# (connect, read) seconds for every request. The apiserver answers a get, list, create,
# patch or delete in milliseconds; 30 s of silence is a dead connection, not a slow answer.
TIMEOUTS = (5.0, 30.0)


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and (SA_DIR / "token").exists()


@lru_cache(maxsize=1)
def api_client():
    from kubernetes import client, config

    try:
        if in_cluster() and not os.environ.get("KUBECONFIG"):
            config.load_incluster_config()
            cfg = client.Configuration.get_default_copy()
        else:
            cfg = client.Configuration()
            config.load_kube_config(config_file=os.environ.get("KUBECONFIG"), client_configuration=cfg)
    except Exception as exc:  # noqa: BLE001 - config errors are user errors here
        raise KfpRayError(
            f"no Kubernetes credentials: {exc}. In a pipeline pod the service account token is used; "
            "elsewhere set KUBECONFIG to a kubeconfig file") from None
    cfg.retries = False  # retries are kube.call's (bounded, logged); urllib3 would add 3 per try
    api = client.ApiClient(cfg)
    _default_timeouts(api.rest_client)
    return api


def _default_timeouts(rest) -> None:
    """Give every request of this client TIMEOUTS unless it names its own, also the ones
    that do not go through call() (the CodeFlare SDK's)."""
    request = rest.request

    def with_timeouts(*args, _request_timeout=None, **kwargs):
        return request(*args, _request_timeout=_request_timeout or TIMEOUTS, **kwargs)

    rest.request = with_timeouts


def own_namespace() -> str | None:
    """The namespace this task runs in: the pod's service account namespace, else the
    kubeconfig context's; None when neither says."""
    ns_file = SA_DIR / "namespace"
    if ns_file.exists():
        return ns_file.read_text().strip() or None
    from kubernetes import config

    try:
        _, active = config.list_kube_config_contexts(config_file=os.environ.get("KUBECONFIG"))
        return (active or {}).get("context", {}).get("namespace") or None
    except Exception:  # noqa: BLE001 - no kubeconfig: unknown
        return None


def current_namespace() -> str:
    """The pod's own namespace, else the kubeconfig context's."""
    ns = own_namespace()
    if not ns:
        raise KfpRayError("cannot tell which namespace to use: set the component's `namespace` input")
    return ns


def core():
    from kubernetes import client

    return client.CoreV1Api(api_client())


def custom():
    from kubernetes import client

    return client.CustomObjectsApi(api_client())


def call(fn, *args, what: str, attempts: int = 6, deadline: float | None = None, **kwargs):
    """One API call with TIMEOUTS, retried (bounded: `attempts`, and never past `deadline`,
    a time.monotonic() time) on throttling, 5xx, timeouts and dropped connections. 401 and
    403 raise AccessDenied at once."""
    asked = kwargs.pop("_request_timeout", None) or TIMEOUTS

    def once():
        timeout = asked
        if deadline is not None:  # a request may not outlive the deadline either
            left = max(0.5, deadline - time.monotonic())
            timeout = (min(timeout[0], left), min(timeout[1], left))
        try:
            return fn(*args, _request_timeout=timeout, **kwargs)
        except Exception as exc:  # noqa: BLE001 - only 401/403 are translated
            if getattr(exc, "status", None) in (401, 403) and not isinstance(exc, AccessDenied):
                raise access_denied(exc, fn, args, what) from None
            raise

    return retry(once, what, attempts=attempts, deadline=deadline)


# What kfp-ray's tasks do with the Kubernetes API as the DSPA's pipeline-runner account:
# (group, resource, verb). `kfp-ray doctor` asks for each; Kueue objects are read when
# allowed, never needed (RHOAI's pipeline-runner role has no kueue.x-k8s.io access).
PIPELINE_RUNNER_NEEDS = (
    *(("ray.io", "rayclusters", v) for v in ("create", "get", "list", "patch", "delete")),
    # lifecycle=rayjob: run_ray_job creates, reads, renews (patch) and deletes its RayJob; the
    # project's sweeper (kfp_ray_gc) lists them
    *(("ray.io", "rayjobs", v) for v in ("create", "get", "list", "patch", "delete")),
    ("", "pods", "list"), ("", "pods/log", "get"), ("", "services", "get"), ("", "secrets", "get"),
    ("", "secrets", "list"),  # run_ray_driver finds the cluster's CA secret by label
)

_VERBS = {"read": "get", "get": "get", "list": "list", "create": "create", "patch": "patch", "replace": "update",
          "delete": "delete"}
_FORBIDDEN = re.compile(r'User "([^"]+)" cannot (\S+) resource "([^"]+)" in API group "([^"]*)"')


def _verb_and_resource(fn, args) -> tuple[str, str, str]:
    """(verb, resource, namespace) of a kubernetes client method call, from its name and
    arguments: custom objects take (group, version, [namespace,] plural, ...), core ones
    (name, namespace, ...) to read/patch/delete and (namespace, ...) to list/create."""
    name = getattr(fn, "__name__", "")
    action = name.split("_", 1)[0]
    verb = _VERBS.get(action, action)
    namespaced = "_namespaced_" in name
    if name.endswith("_custom_object") and len(args) >= 3:
        group = args[0]
        plural = args[3] if namespaced and len(args) > 3 else args[2]
        return verb, f"{plural}.{group}" if group else plural, args[2] if namespaced else ""
    kind = name.split("_namespaced_", 1)[1] if namespaced else name.split("_", 1)[-1]
    resource = "pods/log" if kind == "pod_log" else kind.replace("_", "") + "s"
    ns_at = 0 if action in ("list", "create") else 1
    ns = args[ns_at] if namespaced and len(args) > ns_at and isinstance(args[ns_at], str) else ""
    return verb, resource, ns


def access_denied(exc: BaseException, fn, args, what: str) -> AccessDenied:
    """401/403 as a message a pipeline user can act on, instead of the client's dump."""
    import json

    status = getattr(exc, "status", 0)
    try:
        message = json.loads(getattr(exc, "body", "") or "{}").get("message", "")
    except ValueError:
        message = ""
    message = message or str(getattr(exc, "reason", "") or exc)
    verb, resource, ns = _verb_and_resource(fn, args)
    where = f" in namespace {ns}" if ns else ""
    if status == 401:
        return AccessDenied(
            f"the Kubernetes API refused this task's credentials (401 Unauthorized) to {verb} {resource}{where} "
            f"({what}): {message}. Fix: the service account token is missing, expired or revoked; in a pipeline "
            "pod check the pod's service account token mount, elsewhere refresh KUBECONFIG (`oc login`)", 401)
    m = _FORBIDDEN.search(message)
    who = m.group(1) if m else "this task's identity"
    if m and m.group(1).startswith("system:serviceaccount:"):
        who = m.group(1).rsplit(":", 1)[1]
    if m:
        verb, resource = m.group(2), f"{m.group(3)}.{m.group(4)}" if m.group(4) else m.group(3)
    return AccessDenied(
        f"{who} may not {verb} {resource}{where} ({what}): {message}. Fix: grant {who} `{verb}` on {resource}"
        f"{where} (a Role and RoleBinding; on OpenShift AI the pipeline-runner-<dspa> Role of Data Science "
        "Pipelines allows rayclusters get/list/create/patch/delete), or run the pipeline in a project where it has it",
        403)


def not_found(exc: BaseException) -> bool:
    return getattr(exc, "status", None) == 404


def forbidden(exc: BaseException) -> bool:
    return getattr(exc, "status", None) == 403


def use_with_codeflare_sdk() -> None:
    """Make the CodeFlare SDK use our client (token, CA bundle, TLS verification)."""
    from codeflare_sdk.common.kubernetes_cluster import auth

    auth.api_client = api_client()
