"""A bare API server for unit tests (no controller loops): its store, identities and clients."""

from __future__ import annotations

import json

from kubernetes import client

from kfp_ray_sandbox.apiserver.rbac import Authenticator
from kfp_ray_sandbox.apiserver.resources import Registry
from kfp_ray_sandbox.apiserver.server import ApiServer
from kfp_ray_sandbox.apiserver.store import Store
from kfp_ray_sandbox.certs import ServingCA
from kfp_ray_sandbox.controllers.kueue import KueueController
from kfp_ray_sandbox.controllers.serviceaccounts import ServiceAccountsController
from kfp_ray_sandbox.faults import Faults

NS = "sandbox"


def start_api(tmp, store: Store | None = None) -> ApiServer:
    """Namespaces `sandbox` (Kueue-managed) and `plain`, each with its `default` ServiceAccount."""
    reg, store, auth, faults = Registry(), store or Store(), Authenticator(NS), Faults()
    for name, labels in ((NS, {"kueue.openshift.io/managed": "true"}), ("plain", {})):
        store.create(reg.get("", "namespaces"), {"metadata": {"name": name, "labels": labels}})
    ca = ServingCA()
    (tmp / "ca.crt").write_bytes(ca.ca_pem)
    srv = ApiServer(store, reg, auth, faults, audit_path=tmp / "audit.log", tls=ca.server_context())
    srv.ca_file = str(tmp / "ca.crt")
    srv.admission.append(KueueController(store, reg, faults).admission)
    ServiceAccountsController(store, reg).reconcile()
    srv.start()
    return srv


def api_client(api: ApiServer, identity) -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = api.url
    cfg.ssl_ca_cert = api.ca_file
    cfg.api_key = {"authorization": f"Bearer {identity.token}"}
    return client.ApiClient(cfg)


def status_of(exc) -> dict:
    return json.loads(exc.body)


def raw(api_cl: client.ApiClient, method: str, path: str, body=None, content_type: str = "application/json",
        query: list | None = None):
    """(status, parsed body) of one request through the client's transport, errors included."""
    from kubernetes.client import ApiException

    try:
        data = api_cl.call_api(path, method, query_params=query or [], body=body, auth_settings=["BearerToken"],
                               header_params={"Content-Type": content_type, "Accept": "application/json"},
                               response_type="object", _return_http_data_only=False)
        return data[1], data[0]
    except ApiException as exc:
        return exc.status, json.loads(exc.body)
