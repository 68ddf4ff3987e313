"""A small client of a running sandbox, for tests, benchmarks and `status`.

Kubernetes calls go through the real `kubernetes` client with the sandbox's kubeconfig;
sandbox-only calls (faults, crash, processes) go to its admin-only /sandbox/v1 API.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import urllib.request
from pathlib import Path

import yaml


@functools.lru_cache(maxsize=32)
def _kubeconfig(path: str) -> dict:
    """A sandbox's kubeconfig, read once (written at its start, never changed): tests make a
    client per call, and the kubernetes client parses YAML in pure Python."""
    return yaml.load(Path(path).read_text(), Loader=yaml.CSafeLoader)


class SandboxClient:
    def __init__(self, info: dict):
        self.info = info
        self.namespace = info["namespace"]

    # --- identities ------------------------------------------------------------
    def _token(self, kubeconfig: str) -> str:
        return _kubeconfig(kubeconfig)["users"][0]["user"]["token"]

    def token(self, as_pipeline_runner: bool = False) -> str:
        """The admin's bearer token (what `oc whoami -t` gives a user), or pipeline-runner's."""
        return self._token(self.info["kubeconfig_pipeline_runner" if as_pipeline_runner else "kubeconfig"])

    def api_client(self, as_pipeline_runner: bool = False):
        """A kubernetes ApiClient for the admin, or for the pipeline-runner service account."""
        from kubernetes import client, config

        path = self.info["kubeconfig_pipeline_runner" if as_pipeline_runner else "kubeconfig"]
        cfg = client.Configuration()
        # server, token and CA: TLS verified
        config.load_kube_config_from_dict(copy.deepcopy(_kubeconfig(path)), client_configuration=cfg)
        return client.ApiClient(cfg)

    # --- control API -----------------------------------------------------------
    def _control(self, method: str, path: str, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.info["api"] + path, data=data, method=method, headers={
            "Authorization": "Bearer " + self._token(self.info["kubeconfig"]), "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30, context=self._tls()) as resp:
            return json.loads(resp.read() or b"null")

    def _tls(self):
        import ssl

        return ssl.create_default_context(cafile=self.info["ca_file"]) if self.info.get("ca_file") else None

    def set_faults(self, faults: dict) -> dict:
        return self._control("PUT", "/sandbox/v1/faults", faults)

    def patch_faults(self, patch: dict) -> dict:
        """Change some faults, leaving the others (JSON merge patch: null removes a key)."""
        return self._control("PATCH", "/sandbox/v1/faults", patch)

    def clear_faults(self) -> dict:
        return self._control("DELETE", "/sandbox/v1/faults")

    def s3_held(self) -> list[str]:
        """The bucket/key paths of the S3 requests the "s3" hold fault holds now."""
        return self._control("GET", "/sandbox/v1/s3/held")["held"]

    def crash_head(self, cluster: str, namespace: str | None = None) -> dict:
        return self._control("POST", f"/sandbox/v1/namespaces/{namespace or self.namespace}/rayclusters/{cluster}/crash")

    def processes(self) -> list[dict]:
        return self._control("GET", "/sandbox/v1/processes")["pods"]

    # --- reading ---------------------------------------------------------------
    def audit(self) -> list[dict]:
        with open(self.info["audit_log"]) as fh:
            return [json.loads(line) for line in fh if line.strip()]

    def data_connection(self) -> dict[str, str]:
        """The data connection secret's values, read through the API as a user would."""
        from kubernetes import client

        secret = client.CoreV1Api(self.api_client()).read_namespaced_secret(self.info["data_connection"], self.namespace)
        return {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}

    def s3(self):
        import boto3
        from botocore.config import Config

        dc = self.data_connection()
        return boto3.client("s3", endpoint_url=dc["AWS_S3_ENDPOINT"], aws_access_key_id=dc["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=dc["AWS_SECRET_ACCESS_KEY"], region_name=dc["AWS_DEFAULT_REGION"],
                            config=Config(s3={"addressing_style": "path"}))

    def summary(self) -> dict:
        from kubernetes import client

        co = client.CustomObjectsApi(self.api_client())
        rcs = co.list_namespaced_custom_object("ray.io", "v1", self.namespace, "rayclusters")["items"]
        cq = co.get_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues", "cluster-queue")
        usage = {r["name"]: r["total"] for f in (cq.get("status") or {}).get("flavorsUsage") or [] for r in f["resources"]}
        return {
            "rayclusters": [{"name": rc["metadata"]["name"], "state": (rc.get("status") or {}).get("state"),
                             "workers": (rc.get("status") or {}).get("desiredWorkerReplicas", 0),
                             "ready_workers": (rc.get("status") or {}).get("readyWorkerReplicas", 0)} for rc in rcs],
            "queue_usage": usage,
            "pending_workloads": (cq.get("status") or {}).get("pendingWorkloads", 0),
        }
