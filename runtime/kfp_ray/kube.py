"""Kubernetes access, the same code path in a pipeline pod and on this machine.

In a RHOAI pipeline pod: the service account's token and CA bundle (TLS verified). Else:
$KUBECONFIG (or ~/.kube/config). One ApiClient is built and shared, also with the CodeFlare
SDK, whose own client would drop the kubeconfig's CA and TLS settings.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from .errors import KfpRayError
from .wait import retry

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


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
    return client.ApiClient(cfg)


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


def call(fn, *args, what: str, **kwargs):
    """One API call, retried (bounded) on throttling, 5xx and dropped connections."""
    return retry(lambda: fn(*args, **kwargs), what)


def not_found(exc: BaseException) -> bool:
    return getattr(exc, "status", None) == 404


def forbidden(exc: BaseException) -> bool:
    return getattr(exc, "status", None) == 403


def use_with_codeflare_sdk() -> None:
    """Make the CodeFlare SDK use our client (token, CA bundle, TLS verification)."""
    from codeflare_sdk.common.kubernetes_cluster import auth

    auth.api_client = api_client()
