"""The sandbox: API server, Kueue, KubeRay (RayClusters and RayJobs), scheduler/kubelet and S3, started together.

    box = Sandbox(state_dir)
    info = box.start()      # returns once every part answers
    ...
    box.stop()              # stops every Ray process it started, leaves nothing behind

start() first starts a watchdog (reaper.py) that does the same if the process that started the
sandbox dies without stopping it, however it dies (SIGKILL included).
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from . import nodepool
from .apiserver import errors, scc
from .apiserver.admission import LimitRanger, QuotaFaultAdmission, ResourceQuotaAdmission, ServiceAccountAdmission
from .apiserver.http import HttpServer
from .apiserver.policy import StoredPolicy
from .apiserver.rbac import Authenticator
from .apiserver.resources import Registry
from .apiserver.server import ApiServer
from .apiserver.store import Store
from .certs import ServingCA
from .controllers.codeflare import CodeFlareOperator
from .controllers.kubelet import VOLUMES_DIR, Kubelet
from .controllers.kuberay import KubeRayController
from .controllers.kuberay_rhoai import GATEWAY_NAME, GATEWAY_NAMESPACE, PLATFORM_NAMESPACE, RhoaiKubeRay
from .controllers.kueue import KueueController
from .controllers.namespaces import NamespaceController, NamespaceLifecycle, SecurityAllocator, prepare_namespace
from .controllers.node import NodeController
from .controllers.rayjob import RayJobController
from .controllers.serviceaccounts import ServiceAccountsController
from .faults import Faults
from .gateway import Gateway
from .network import Network
from .pipelines_api.server import DSPA, KubeRbacProxy, OAuthProxy, PipelinesApi
from .pipelines_api.server import ROUTE as DSPA_ROUTE
from .pipelines_api.workflow import STORAGE_SECRET, Engine
from .platforms import platform as platform_profile
from .proxy import KubeProxy
from .raynode import free_port
from .reaper import Watchdog, reap
from .s3 import S3Server

if TYPE_CHECKING:
    from .wheelhouse import IndexServer

DATA = Path(__file__).resolve().parent / "data"
NAMESPACE = "sandbox"
DATA_CONNECTION = "aws-connection-minio"  # the seed's data connection named `minio`
BUCKET = "kfp-ray"
INFO_FILE = "sandbox.json"
SHUTDOWN_GRACE = 2.0
LIVE_FILES = (INFO_FILE, "kubeconfig", "kubeconfig-pipeline-runner", "ca.crt")  # a running server's address and credentials


LOCAL_QUEUE_LAYOUTS = ("seed", "rhoai-default")


def bootstrap_objects(local_queue_layout: str = "seed") -> list[dict]:
    """The objects an RHOAI administrator sets up (data/bootstrap.yaml). `local_queue_layout`:
    "seed": LocalQueue `local-queue-test`, annotated kueue.x-k8s.io/default-queue (the seed's);
    "rhoai-default": instead the LocalQueue opendatahub-operator creates in each managed namespace
    (internal/controller/components/kueue/kueue_support.go createDefaultLocalQueue): named
    `default`, annotated only opendatahub.io/managed=false, so clients find it by name, not by
    annotation. The ClusterQueue and its quota are the seed's in both."""
    if local_queue_layout not in LOCAL_QUEUE_LAYOUTS:
        raise ValueError(f"unknown local_queue_layout {local_queue_layout!r}; known: {', '.join(LOCAL_QUEUE_LAYOUTS)}")
    objects = yaml.safe_load((DATA / "bootstrap.yaml").read_text())
    if local_queue_layout == "rhoai-default":
        for obj in objects:
            if obj["kind"] == "LocalQueue":
                obj["metadata"] = {"name": "default", "namespace": obj["metadata"]["namespace"],
                                   "annotations": {"opendatahub.io/managed": "false"}}
    return objects


def local_queue_of(objects: list[dict]) -> str:
    return next(o["metadata"]["name"] for o in objects if o["kind"] == "LocalQueue")


def kubeconfig(server: str, user: str, token: str, namespace: str, ca_pem: bytes) -> dict:
    """A kubeconfig as `oc login` writes one: the server's CA inline, so TLS is verified."""
    return {"apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": "sandbox", "cluster": {
                "server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "sandbox", "context": {"cluster": "sandbox", "user": user, "namespace": namespace}}],
            "current-context": "sandbox"}


def install_builtin_admission(store, registry, network, faults) -> None:
    """kube-apiserver's built-in admission and storage defaulting, for every writer
    (controllers too): NamespaceLifecycle, ServiceAccount, namespace and Service defaulting
    (the ClusterIP allocator), LimitRanger and ResourceQuota (the namespace's objects, and the
    `exceed_quota` fault), the pods' default grace;
    OpenShift's namespace UID/MCS allocation and SecurityContextConstraints admission (scc.py)."""
    store.default_grace = lambda: faults.platform("termination_grace_s")
    allocator = SecurityAllocator(store, registry)
    store.admission += [NamespaceLifecycle(store, registry), ServiceAccountAdmission(store, registry),
                        LimitRanger(store, registry)]
    store.validation += [prepare_namespace, allocator, network.allocate_service_ip,
                         QuotaFaultAdmission(store, registry, faults), ResourceQuotaAdmission(store, registry)]
    scc.install(store, registry, allocator, StoredPolicy(store, registry))


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


class Sandbox:
    def __init__(self, state_dir: str | Path | None = None, max_real_workers: int | None = None,
                 local_queue_layout: str = "seed", platform: str | None = None, nodes=None):
        """`local_queue_layout`: "seed" (default) gives LocalQueue `local-queue-test`, annotated as the
        namespace's default queue; "rhoai-default" gives RHOAI's operator-made LocalQueue `default`
        without that annotation (see bootstrap_objects). `info["local_queue"]` names it.
        `platform`: the OpenShift AI release it plays (platforms.py; None: the default).
        `nodes`: the node pool, NodeGroups (nodepool.py; None: OpenShift's 3 control-plane
        nodes, 2 CPU workers and a GPU node)."""
        self.platform = platform_profile(platform)
        self.nodes = tuple(nodes or nodepool.OPENSHIFT)
        self.bootstrap = bootstrap_objects(local_queue_layout)
        self.own_dir = state_dir is None
        # An own state dir is made in start(), once the watchdog will remove it if the owner dies.
        self.state_dir = Path(state_dir or Path(tempfile.gettempdir()) / f"kfp-ray-sandbox-{secrets.token_hex(5)}")
        self.max_real_workers = max_real_workers or int(os.environ.get("KFP_RAY_SANDBOX_MAX_WORKERS", "2"))
        self.registry = Registry(openshift=True, gateway_api=self.platform.ray_security == "kuberay")
        self.store = Store()
        self.auth = Authenticator(NAMESPACE)
        self.faults = Faults()
        self.network = Network()
        self.s3 = S3Server(faults=self.faults)
        self.api: ApiServer | None = None
        self.ca: ServingCA | None = None
        self.controllers: list = []
        self.kubelet: Kubelet | None = None
        self.proxy: KubeProxy | None = None
        self.pipelines_api: PipelinesApi | None = None
        self.pipelines_http = None
        self.gateway_http = None  # RHOAI 3.x's data-science-gateway (gateway.py)
        self.pip_index: IndexServer | None = None
        self.info: dict = {}
        self.watchdog: Watchdog | None = None
        self.stopped = False

    # --- lifecycle -------------------------------------------------------------
    def start(self) -> dict:
        self.watchdog = Watchdog().start()
        for name in LIVE_FILES:
            self.watchdog.remove_on_death(self.state_dir / name)
        if self.own_dir:
            self.watchdog.remove_on_death(self.state_dir)
        self.watchdog.watch_records(self.state_dir / "pods")
        # the pods' secret volumes (the clusters' CA keys): gone with the owner, even when it is SIGKILLed
        self.watchdog.remove_on_death(self.state_dir / "pods" / VOLUMES_DIR)
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=not self.own_dir)
        (self.state_dir / "pods").mkdir(exist_ok=True)
        self.s3.start()
        self.s3.create_bucket(BUCKET)
        self.ca = ServingCA()
        self.api = ApiServer(self.store, self.registry, self.auth, self.faults,
                             audit_path=self.state_dir / "audit.log", tls=self.ca.server_context())
        kueue = KueueController(self.store, self.registry, self.faults, platform=self.platform)
        if self.platform.ray_security == "kuberay":  # 3.x: Red Hat's KubeRay secures the cluster
            ray_platform = RhoaiKubeRay(self.store, self.registry, self.faults)
        else:  # 2.x: the CodeFlare operator does
            ray_platform = CodeFlareOperator(self.store, self.registry, self.faults)
        kuberay = KubeRayController(self.store, self.registry, ray_platform, self.max_real_workers)
        # KubeRay's RayJob controller creates its RayClusters and submitter pods through the API
        # server's admission (CodeFlare's and Kueue's webhooks), as the real operator's client does
        rayjobs = RayJobController(self.store, self.registry, admit=lambda *a: self.api.admit(*a))
        rayjobs.follow(kueue)  # each change reaches Kueue before KubeRay's RayJob controller (kueue.py ORDER)
        self.proxy = KubeProxy(self.store, self.registry, self.network, lambda pod, port: self.kubelet.pod_port(pod, port),
                               faults=self.faults)
        self.kubelet = Kubelet(self.store, self.registry, self.network, self.faults, self.state_dir / "pods",
                               forwarder=self.proxy.forwarder)
        install_builtin_admission(self.store, self.registry, self.network, self.faults)
        self.api.admission.append(kueue.admission)
        self.api.admission.append(ray_platform.admission)
        self.api.log_provider = self.kubelet.pod_log
        self.api.pod_runtime = self.kubelet  # exec, port-forward, logs -f (apiserver/streams.py)
        self.api.control = self._control
        if self.platform.ray_security == "kuberay":
            self.gateway_http = HttpServer(Gateway(self.store, self.registry, self.auth, GATEWAY_NAMESPACE, GATEWAY_NAME),
                                           port=free_port(), tls=self.ca.server_context())
            self.gateway_http.start()
        self._bootstrap()
        accounts = ServiceAccountsController(self.store, self.registry, self.ca.ca_pem)
        node = NodeController(self.store, self.registry, self.state_dir, pool=self.nodes)
        for c in (accounts, node):  # the node and every `default` account exist once start returns
            c.reconcile()
        self.controllers = [kueue, kuberay, rayjobs, self.kubelet, self.proxy, accounts, node,
                            NamespaceController(self.store, self.registry)]
        for c in self.controllers:
            c.start()
        self.api.start()
        self.kubelet.api_endpoint, self.kubelet.ca_pem = self.api.http.address, self.ca.ca_pem
        self.kubelet.service_account_token = self.auth.service_account_token
        # the DSPA's Route: its oauth-proxy in front of the KFP API server (pipelines_api/)
        self.pipelines_api = PipelinesApi(NAMESPACE, server=self.platform.name)
        from .wheelhouse import IndexServer  # here: `python -m kfp_ray_sandbox.wheelhouse` imports the package first

        self.pip_index = IndexServer().start()  # the wheelhouse the clean task pods install from
        self.engine = Engine(self.pipelines_api.store, _Pods(self), self.s3.client(), workflows=_Workflows(self),
                             pip_index=self.pip_index.url,
                             bucket=BUCKET,
                             namespace=NAMESPACE, s3_endpoint=self.s3.endpoint,
                             retry_backoff_cap=lambda: self.faults.platform("task_retry_backoff_cap_s"))
        self.pipelines_api.engine = self.engine
        self.pipelines_api.start_scheduler()
        # the DSPA route's proxy: kube-rbac-proxy on 3.x, oauth-proxy on 2.x
        proxy = KubeRbacProxy if self.platform.pipelines_proxy == "kube-rbac-proxy" else OAuthProxy
        self.pipelines_http = HttpServer(proxy(self.pipelines_api, self.auth, NAMESPACE, policy=self.api.policy),
                                         port=free_port(), tls=self.ca.server_context())
        self.pipelines_http.start()
        self._publish_dspa()
        admin_cfg = self.state_dir / "kubeconfig"
        runner_cfg = self.state_dir / "kubeconfig-pipeline-runner"
        ca_file = self.state_dir / "ca.crt"
        ca_file.write_bytes(self.ca.ca_pem)
        for path, who in ((admin_cfg, self.auth.admin), (runner_cfg, self.auth.pipeline_runner)):
            _write_private(path, yaml.safe_dump(kubeconfig(self.api.url, who.user, who.token, NAMESPACE, self.ca.ca_pem)))
        self.info = {"api": self.api.url, "pipelines_api": self.pipelines_http.url, "ca_file": str(ca_file),
                     "kubeconfig": str(admin_cfg), "kubeconfig_pipeline_runner": str(runner_cfg),
                     "namespace": NAMESPACE, "s3_endpoint": self.s3.endpoint, "s3_bucket": BUCKET,
                     "data_connection": DATA_CONNECTION, "local_queue": local_queue_of(self.bootstrap),
                     "audit_log": str(self.state_dir / "audit.log"), "state_dir": str(self.state_dir),
                     "platform": self.platform.name, "pip_index": self.pip_index.url, "pipelines_proxy": self.platform.pipelines_proxy,
                     "pid": os.getpid()}
        (self.state_dir / INFO_FILE).write_text(json.dumps(self.info, indent=2) + "\n")
        return self.info

    def stop(self) -> None:
        """Stop everything. Ray gets SHUTDOWN_GRACE s to stop in order, then is killed: nothing
        of a sandbox outlives it, so more grace buys nothing, and an interrupted owner must be
        gone within seconds. The controllers stop meanwhile (each waits out its loop's resync).
        A second call does nothing."""
        if self.stopped:
            return
        self.stopped = True
        killer = threading.Timer(SHUTDOWN_GRACE, reap, kwargs={"record_dirs": [self.state_dir / "pods"], "settle": False})
        killer.daemon = True
        killer.start()
        if self.pipelines_api is not None and self.pipelines_api.scheduler is not None:
            self.pipelines_api.scheduler.stop()
        if self.pipelines_api is not None and self.pipelines_api.engine is not None:
            self.pipelines_api.engine.shutdown()  # runs end with their pods, as the kubelet stops
        stoppers = [threading.Thread(target=c.shutdown if c is self.kubelet else c.stop, name=f"stop-{c.name}")
                    for c in self.controllers]
        for t in stoppers:
            t.start()
        for t in stoppers:
            t.join()
        killer.cancel()
        killer.join()
        if self.pipelines_http is not None:
            self.pipelines_http.stop()
        if self.pip_index is not None:
            self.pip_index.stop()
        if self.gateway_http is not None:
            self.gateway_http.stop()
        if self.api is not None:
            self.api.stop()
        self.s3.stop()
        if self.own_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)
        else:
            for name in LIVE_FILES:
                (self.state_dir / name).unlink(missing_ok=True)
        if self.watchdog is not None:
            self.watchdog.close()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    # --- bootstrap -------------------------------------------------------------
    def _create(self, obj: dict) -> dict:
        group, _, version = obj["apiVersion"].rpartition("/")
        rt = self.registry.by_kind(group, obj["kind"])
        self.api.defaulter.admit("CREATE", rt, obj, None)
        return self.store.create(rt, obj)

    def _bootstrap(self) -> None:
        for obj in self.bootstrap + nodepool.flavors(self.nodes):
            self._create(obj)
        if self.platform.ray_security == "kuberay":
            self._bootstrap_gateway()
        self._create({"apiVersion": "v1", "kind": "ServiceAccount",
                      "metadata": {"name": self.auth.pipeline_runner.user.rsplit(":", 1)[1], "namespace": NAMESPACE}})
        values = {"AWS_ACCESS_KEY_ID": self.s3.access_key, "AWS_SECRET_ACCESS_KEY": self.s3.secret_key,
                  "AWS_S3_ENDPOINT": self.s3.endpoint, "AWS_S3_BUCKET": BUCKET,
                  "AWS_DEFAULT_REGION": self.s3.region}
        # the DSPA's object storage secret: the pipeline root's keys, for the launcher (not for tasks)
        self._create({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                      "metadata": {"name": STORAGE_SECRET, "namespace": NAMESPACE},
                      "data": {"accesskey": base64.b64encode(self.s3.access_key.encode()).decode(),
                               "secretkey": base64.b64encode(self.s3.secret_key.encode()).decode()}})
        self._create({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                      "metadata": {"name": DATA_CONNECTION, "namespace": NAMESPACE,
                                   "labels": {"opendatahub.io/dashboard": "true", "opendatahub.io/managed": "true"},
                                   "annotations": {"opendatahub.io/connection-type": "s3",
                                                   "openshift.io/display-name": "minio"}},
                      "data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}})

    def _bootstrap_gateway(self) -> None:
        """RHOAI 3.x's platform namespace (where KubeRay puts the dashboards' HTTPRoutes) and the
        Gateway they attach to, as the RHOAI operator sets it up."""
        for ns in (PLATFORM_NAMESPACE, GATEWAY_NAMESPACE):
            self._create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        self._create({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                      "metadata": {"name": GATEWAY_NAME, "namespace": GATEWAY_NAMESPACE},
                      "spec": {"gatewayClassName": "data-science-gateway-class",
                               "listeners": [{"name": "https", "protocol": "HTTPS", "port": 443,
                                              # a DNS name on the real cluster; the loopback address here
                                              "hostname": self.gateway_http.url.split("://", 1)[1],
                                              "allowedRoutes": {"namespaces": {"from": "All"}}}]}})

    def _publish_dspa(self) -> None:
        """The DataSciencePipelinesApplication behind the pipelines server, and its API Route as
        DSPO makes it (config/internal/apiserver/route/route.yaml.tmpl at 5e01e73): what
        clients find the server by. Like the sandbox's other Routes, its host carries the
        loopback port (a real Route's host is a DNS name on port 443)."""
        self._create({"apiVersion": "datasciencepipelinesapplications.opendatahub.io/v1",
                      "kind": "DataSciencePipelinesApplication",
                      "metadata": {"name": DSPA, "namespace": NAMESPACE},
                      "spec": {"dspVersion": "v2", "objectStorage": {"externalStorage": {
                          "bucket": BUCKET, "host": self.s3.endpoint.split("://", 1)[-1], "scheme": "http",
                          "s3CredentialsSecret": {"secretName": STORAGE_SECRET, "accessKey": "accesskey",
                                                  "secretKey": "secretkey"}}}}})
        host = self.pipelines_http.url.split("://", 1)[1]
        self._create({"apiVersion": "route.openshift.io/v1", "kind": "Route",
                      "metadata": {"name": DSPA_ROUTE, "namespace": NAMESPACE,
                                   "labels": {"app": DSPA_ROUTE, "component": "data-science-pipelines"}},
                      "spec": {"host": host, "to": {"kind": "Service", "name": DSPA_ROUTE, "weight": 100},
                               "port": {"targetPort": "oauth"}, "wildcardPolicy": "None",
                               "tls": {"termination": "reencrypt", "insecureEdgeTerminationPolicy": "Redirect"}},
                      "status": {"ingress": [{"host": host, "routerName": "default", "wildcardPolicy": "None",
                                              "conditions": [{"type": "Admitted", "status": "True"}]}]}})

    # --- control API (admin only): /sandbox/v1/... ------------------------------
    def _control(self, method: str, path: str, req: dict, who) -> tuple[int, object]:
        if path == "/sandbox/v1/info" and method == "GET":
            return 200, self.info
        if path == "/sandbox/v1/faults":
            if method == "GET":
                return 200, self.faults.get()
            if method in ("PUT", "POST", "PATCH"):
                try:
                    if method == "PATCH":
                        return 200, self.faults.patch(req["body"] or {})
                    return 200, self.faults.set(req["body"] or {})
                except ValueError as exc:
                    raise errors.bad_request(str(exc)) from None
            if method == "DELETE":
                self.faults.clear()
                return 200, self.faults.get()
        if path == "/sandbox/v1/s3/held" and method == "GET":
            return 200, {"held": self.faults.s3_held()}
        if path == "/sandbox/v1/processes" and method == "GET":
            return 200, {"pods": self.kubelet.processes()}
        m = re.fullmatch(r"/sandbox/v1/namespaces/([^/]+)/rayclusters/([^/]+)/crash", path)
        if m and method == "POST":
            if not self.kubelet.crash(m.group(1), m.group(2)):
                raise errors.ApiError(409, "Conflict", f"RayCluster {m.group(1)}/{m.group(2)} has no running head to crash")
            return 200, {"crashed": m.group(2)}
        raise errors.path_not_found()


class _Pods:
    """The run engine's pods (pipelines_api/workflow.py), in the sandbox's store as Argo's
    controller makes them: defaulted and validated like any created pod, run by the kubelet."""

    def __init__(self, box: Sandbox):
        self.box = box
        self.rt = box.registry.by_kind("", "Pod")

    def create(self, pod: dict) -> dict:
        return self.box._create(pod)

    def get(self, name: str) -> dict | None:
        return self.box.store.find(self.rt, NAMESPACE, name)

    def delete(self, name: str) -> None:
        try:
            self.box.store.delete(self.rt, NAMESPACE, name)
        except errors.ApiError:
            pass  # gone already


class _Workflows:
    """The run engine's Argo Workflows, in the sandbox's store: created as the KFP API server
    creates them (admission, etcd's size limit), updated as Argo's controller updates them."""

    def __init__(self, box: Sandbox):
        self.box = box
        self.rt = box.registry.by_kind("argoproj.io", "Workflow")

    def create(self, workflow: dict) -> dict:
        return self.box._create(workflow)

    def update(self, workflow: dict) -> dict:
        return self.box.store.update(self.rt, workflow, check_rv=False)

    def delete(self, name: str) -> None:
        try:
            self.box.store.delete(self.rt, NAMESPACE, name)
        except errors.ApiError:
            pass  # gone already


def wait_until(predicate, timeout: float, what: str, interval: float = 0.1):
    """Poll predicate until it returns a truthy value; TimeoutError names what it waited for."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
