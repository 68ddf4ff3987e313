"""An API server alone (no controllers, nothing runs), and raw HTTPS calls to it, for the tests of
OpenAPI, Table output, protobuf bodies and field validation; plus the real kubectl when installed."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from kfp_ray_sandbox.apiserver.rbac import Authenticator
from kfp_ray_sandbox.apiserver.resources import Registry
from kfp_ray_sandbox.apiserver.server import ApiServer
from kfp_ray_sandbox.apiserver.store import Store
from kfp_ray_sandbox.certs import ServingCA
from kfp_ray_sandbox.core import kubeconfig
from kfp_ray_sandbox.faults import Faults

NS = "sandbox"
KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")


class Api:
    """A started ApiServer with its admin token, CA and kubeconfig."""

    def __init__(self, tmp: Path, registry: Registry | None = None):
        self.registry = registry or Registry()
        self.store = Store()
        ns = self.registry.get("", "namespaces")
        self.store.create(ns, {"metadata": {"name": NS}})
        self.auth = Authenticator(NS)
        ca = ServingCA()
        self.server = ApiServer(self.store, self.registry, self.auth, Faults(), audit_path=tmp / "audit.log",
                                tls=ca.server_context())
        self.server.start()
        self.ca_file = tmp / "ca.crt"
        self.ca_file.write_bytes(ca.ca_pem)
        self.kubeconfig = tmp / "kubeconfig"
        admin = self.auth.admin
        self.kubeconfig.write_text(yaml.safe_dump(kubeconfig(self.server.url, admin.user, admin.token, NS, ca.ca_pem)))
        self.home = tmp / "home"  # kubectl's discovery/openapi cache, per server
        self.home.mkdir()
        self._ctx = ssl.create_default_context(cafile=str(self.ca_file))

    def stop(self) -> None:
        self.server.stop()

    def call(self, method: str, path: str, body: bytes | dict | None = None, headers: dict | None = None):
        """(status, headers, body bytes) of one request as the admin."""
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        hdrs = {"Authorization": f"Bearer {self.auth.admin.token}", "Content-Type": "application/json",
                **(headers or {})}
        req = urllib.request.Request(self.server.url + path, data=data, method=method, headers=hdrs)
        opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=self._ctx), _NoRedirect())
        try:
            with opener.open(req, timeout=30) as resp:
                return resp.status, resp.headers, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.headers, err.read()

    def json(self, method: str, path: str, body=None, headers: dict | None = None):
        code, hdrs, raw = self.call(method, path, body, headers)
        return code, hdrs, json.loads(raw) if raw else None

    def kubectl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        env = {"KUBECONFIG": str(self.kubeconfig), "HOME": str(self.home), "PATH": "/usr/bin:/bin"}
        return subprocess.run([KUBECTL, *args], env=env, capture_output=True, text=True, timeout=timeout)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None
