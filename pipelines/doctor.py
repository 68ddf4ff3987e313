"""`kfp-ray doctor [--namespace N]`: checks what a kfp-ray run needs in a namespace, one line
per check, each failure with its fix. Exit code 1 when any check fails.

  kubernetes API           the kubeconfig's cluster answers, and who you are
  Ray / Kueue / CodeFlare  the APIs that RHOAI's ray, kueue and codeflare components serve
  platform                 which OpenShift AI release it is (2.x or 3.x), from the APIs served
  Kueue opt-in             on 3.x, the namespace's kueue.openshift.io/managed=true label, without
                           which the Red Hat build of Kueue's webhooks skip its RayClusters
  LocalQueue, ClusterQueue the namespace's queue, its ClusterQueue, quota and usage (if readable)
  default queue            WARN when a run started without local_queue (from the dashboard or
                           kfp.Client) would wait for a queue that does not exist: pipeline-runner
                           may not read Kueue, so its provision task can only use the LocalQueue
                           named `default`
  data connection, bucket  the secret, its keys, and its bucket reachable with them
  pipelines route, API     the DSPA's route, and its API answering through the auth proxy
  pipeline-runner access   every verb kfp-ray's tasks use, asked for the DSPA's pipeline-runner
                           account (SelfSubjectAccessReview, impersonating it as `oc auth can-i
                           --as` does; skipped if you may not impersonate it)

Secrets are read to check them, never printed."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from kfp_ray.diagnose import condition
from kfp_ray.queues import DEFAULT_QUEUE_NAME as NAMED_DEFAULT
from kfp_ray.queues import default_queue

from . import connection
from .connection import kubeconfig_path

TIMEOUT = (5.0, 30.0)
DATA_CONNECTION = "aws-connection-minio"  # the pipelines' default `data_connection`
KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_S3_ENDPOINT", "AWS_S3_BUCKET")
APIS = [  # name, group, version, resources, fix
    ("Ray API", "ray.io", "v1", ("rayclusters",),
     "enable the ray component: DataScienceCluster spec.components.ray.managementState: Managed"),
    ("Kueue API", "kueue.x-k8s.io", "v1beta1", ("localqueues", "clusterqueues", "workloads"),
     "enable kueue: on OpenShift AI 3.x install the Red Hat build of Kueue operator and set DataScienceCluster "
     "spec.components.kueue.managementState: Unmanaged (2.x: Managed)"),
]
# What tells the releases apart (kfp-ray follows what the cluster serves, never a user's flag):
# 2.x runs the CodeFlare operator (its AppWrapper API, workload.codeflare.dev); 3.x has none
# (opendatahub-operator #2468) and KubeRay secures clusters itself, publishing dashboards as
# Gateway API HTTPRoutes (red-hat-data-services/kuberay rhoai-3.3).
PLATFORMS = (  # group, version, resource, release, what the platform line says
    ("workload.codeflare.dev", "v1beta2", "appwrappers", "2.x",
     "OpenShift AI 2.x: the CodeFlare operator secures RayClusters (oauth-proxy sidecar, mTLS from its CA, "
     "finalizer ray.openshift.ai/oauth-finalizer)"),
    ("gateway.networking.k8s.io", "v1", "httproutes", "3.x",
     "OpenShift AI 3.x: KubeRay secures RayClusters (kube-rbac-proxy sidecar, cert-manager mTLS, finalizer "
     "ray.io/authentication-resources; dashboards on the data-science-gateway)"),
)
DEFAULT_QUEUE = "kueue.x-k8s.io/default-queue"
# The Red Hat build of Kueue's opt-in (openshift/kueue-operator release-1.1: every namespaced Kueue
# webhook, and so the suspension of a new RayCluster, applies only where it is set).
KUEUE_MANAGED = "kueue.openshift.io/managed"


@dataclass
class Check:
    name: str
    status: str  # PASS, FAIL, WARN (works, with a catch) or SKIP
    detail: str
    fix: str = ""

    def line(self) -> str:
        fix = f" -- fix: {self.fix}" if self.fix and self.status in ("FAIL", "WARN") else ""
        return f"{self.status:4}  {self.name}: {self.detail}{fix}"


def add_parser(sub) -> None:
    p = sub.add_parser("doctor", help="check what a run needs, one line per check",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--local-queue", help="the LocalQueue runs will use (default: the namespace's default queue)")
    p.add_argument("--data-connection", default=DATA_CONNECTION,
                   help=f"the data connection secret runs will use (default {DATA_CONNECTION})")
    connection.add_arguments(p)  # --host, --namespace, --token-file, --ca-bundle
    p.set_defaults(fn=cmd_doctor)


def cmd_doctor(args) -> int:
    checks = []
    for check in Doctor(args).run():
        checks.append(check)
        print(check.line(), flush=True)
    failed = [c.name for c in checks if c.status == "FAIL"]
    warned = [c.name for c in checks if c.status == "WARN"]
    print(f"\n{len(checks) - len(failed)} of {len(checks)} checks passed" + (f"; failed: {', '.join(failed)}" if failed else "")
          + (f"; warnings: {', '.join(warned)}" if warned else ""))
    return 1 if failed else 0


class Doctor:
    def __init__(self, args):
        self.args = args
        self.api = None  # kubernetes ApiClient, once the API answers
        self.ns = args.namespace or ""
        self.user = ""
        self.cluster_queue = ""
        self.dspa = ""
        self.conn = None
        self.queues: list[dict] | None = None  # the namespace's LocalQueues, once listed
        self.release = ""  # "2.x" or "3.x", once the platform check found it

    def run(self):
        yield self.kubernetes()
        served = {}
        for name, group, version, resources, fix in APIS:
            served[group] = self.api_group(name, group, version, resources, fix)
            yield served[group]
        yield self.platform()
        if served["kueue.x-k8s.io"].status == "PASS":
            yield self.kueue_opt_in()
            yield self.local_queue()
            yield self.cluster_queue_check()
            yield self.default_queue()
        else:
            yield Check("Kueue opt-in", "SKIP", "no Kueue API")
            yield Check("LocalQueue", "SKIP", "no Kueue API")
            yield Check("ClusterQueue", "SKIP", "no Kueue API")
            yield Check("default queue", "SKIP", "no Kueue API")
        secret = self.data_connection()
        yield secret[0]
        yield self.bucket(secret[1])
        route = self.route()
        yield route
        yield self.pipelines_api(route)
        yield self.runner_access()
        yield self.kueue_insight()
        yield self.run_events()

    # --- Kubernetes --------------------------------------------------------------------
    def kubernetes(self) -> Check:
        from kubernetes import client, config

        try:
            config.load_kube_config(config_file=kubeconfig_path())
            context = config.list_kube_config_contexts(config_file=kubeconfig_path())[1]["context"]
            self.ns = self.ns or context.get("namespace") or "default"
            self.api = client.ApiClient()
            review = client.AuthenticationV1Api(self.api).create_self_subject_review(
                {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}, _request_timeout=TIMEOUT)
            self.user = review.status.user_info.username
        except Exception as exc:  # noqa: BLE001 - said with the fix
            self.api = None
            return Check("kubernetes API", "FAIL", _why(exc), "log in (`oc login ...`) or point $KUBECONFIG at the cluster")
        return Check("kubernetes API", "PASS", f"{self.api.configuration.host} as {self.user}, namespace {self.ns}")

    def _skipped(self, name: str) -> Check:
        return Check(name, "SKIP", "the Kubernetes API did not answer")

    def api_group(self, name, group, version, resources, fix) -> Check:
        if self.api is None:
            return self._skipped(name)

        try:
            served = self._served(group, version)
        except Exception as exc:  # noqa: BLE001
            return Check(name, "FAIL", _why(exc), fix)
        if served is None:
            return Check(name, "FAIL", f"{group}/{version} is not served", fix)
        missing = [r for r in resources if r not in served]
        if missing:
            return Check(name, "FAIL", f"{group}/{version} lacks {', '.join(missing)}", fix)
        return Check(name, "PASS", f"{group}/{version}: {', '.join(resources)}")

    def _served(self, group: str, version: str) -> set[str] | None:
        """The resources discovery lists for group/version; None when it is not served."""
        from kubernetes import client

        try:
            return {r.name for r in client.CustomObjectsApi(self.api).get_api_resources(
                group, version, _request_timeout=TIMEOUT).resources}
        except Exception as exc:  # noqa: BLE001
            if getattr(exc, "status", 0) == 404:
                return None
            raise

    def platform(self) -> Check:
        """Which OpenShift AI release this is, from the APIs it serves."""
        if self.api is None:
            return self._skipped("platform")
        for group, version, resource, release, what in PLATFORMS:
            try:
                served = self._served(group, version)
            except Exception as exc:  # noqa: BLE001
                return Check("platform", "FAIL", _why(exc), "check that the cluster's API answers discovery")
            if resource in (served or ()):
                self.release = release
                return Check("platform", "PASS", what)
        return Check("platform", "FAIL", "neither the CodeFlare operator's API (OpenShift AI 2.x) nor the Gateway API "
                     "(3.x) is served", "kfp-ray runs on OpenShift AI 2.25 or 3.x with the ray component Managed "
                     "(docs/openshift-ai.md)")

    # --- Kueue -------------------------------------------------------------------------
    def kueue_opt_in(self) -> Check:
        """3.x: is the namespace labelled for the Red Hat build of Kueue? Without the label a new
        RayCluster is not suspended at creation: its pods start outside any quota until Kueue's
        controller stops the cluster and queues it."""
        name = "Kueue opt-in"
        if self.api is None:
            return self._skipped(name)
        from kubernetes import client

        try:
            labels = client.CoreV1Api(self.api).read_namespace(self.ns, _request_timeout=TIMEOUT).metadata.labels or {}
        except Exception as exc:  # noqa: BLE001
            if getattr(exc, "status", 0) in (401, 403):
                return Check(name, "SKIP", f"{self.user} may not read namespace {self.ns} (`oc get project {self.ns} "
                                           f"--show-labels` shows whether it has {KUEUE_MANAGED}=true)")
            return Check(name, "SKIP", _why(exc))
        if labels.get(KUEUE_MANAGED) == "true":
            return Check(name, "PASS", f"{self.ns} is labelled {KUEUE_MANAGED}=true")
        if self.release != "3.x":
            return Check(name, "PASS", f"{self.ns} is not labelled {KUEUE_MANAGED}=true; OpenShift AI 2.x's Kueue acts "
                                       "in every namespace")
        return Check(name, "WARN",
                     f"{self.ns} is not labelled {KUEUE_MANAGED}=true, so the Red Hat build of Kueue's webhooks skip it: "
                     "a new RayCluster is not held for admission, its pods start outside the quota until Kueue stops the "
                     f"cluster and queues it, and OpenShift AI creates no LocalQueue {NAMED_DEFAULT} here",
                     f"`oc label namespace {self.ns} {KUEUE_MANAGED}=true` (an administrator, or the dashboard's "
                     "project settings)")

    def local_queue(self) -> Check:
        if self.api is None:
            return self._skipped("LocalQueue")
        from kubernetes import client

        co = client.CustomObjectsApi(self.api)
        name = self.args.local_queue
        try:
            if not name:
                queues = self._queues(co)
                named = {q["metadata"]["name"]: q for q in queues}
                name = default_queue(queues) or ""  # as run/submit/schedule choose it
                if not name:
                    return Check("LocalQueue", "FAIL", f"namespace {self.ns} has no default LocalQueue"
                                 + (f" (it has {', '.join(sorted(named))})" if named else " (it has none)"),
                                 "create a LocalQueue pointing at a ClusterQueue and annotate it "
                                 f"{DEFAULT_QUEUE}=true, or pass local_queue=<name> to the pipeline")
            lq = co.get_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", self.ns, "localqueues", name,
                                                 _request_timeout=TIMEOUT)
        except Exception as exc:  # noqa: BLE001
            status = getattr(exc, "status", 0)
            if status == 403:
                return Check("LocalQueue", "SKIP", f"{self.user} may not read LocalQueues in {self.ns}")
            if status == 404:
                return Check("LocalQueue", "FAIL", f"LocalQueue {name} does not exist in {self.ns}",
                             "create it, or pass the name of one that exists (`oc get localqueues`)")
            return Check("LocalQueue", "FAIL", _why(exc), "")
        self.cluster_queue = lq["spec"].get("clusterQueue", "")
        active = condition(lq, "Active")
        if active and active.get("status") == "False":
            return Check("LocalQueue", "FAIL", f"{name} is inactive: {active.get('reason')}: {active.get('message')}",
                         f"make its ClusterQueue {self.cluster_queue} exist and be active")
        return Check("LocalQueue", "PASS", f"{name} in {self.ns}, ClusterQueue {self.cluster_queue}")

    def _queues(self, co) -> list[dict]:
        if self.queues is None:
            self.queues = co.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", self.ns, "localqueues",
                                                           _request_timeout=TIMEOUT)["items"]
        return self.queues

    def default_queue(self) -> Check:
        """Is there a LocalQueue named `default`, the one a provision task that may not read
        Kueue uses when a run gives no local_queue?"""
        name = "default queue"
        if self.api is None:
            return self._skipped(name)
        from kubernetes import client

        try:
            queues = self._queues(client.CustomObjectsApi(self.api))
        except Exception as exc:  # noqa: BLE001
            if getattr(exc, "status", 0) == 403:
                return Check(name, "SKIP", f"{self.user} may not list LocalQueues in {self.ns}")
            return Check(name, "SKIP", _why(exc))
        if any(q["metadata"]["name"] == NAMED_DEFAULT for q in queues):
            return Check(name, "PASS", f"LocalQueue {NAMED_DEFAULT} exists: a run without local_queue uses it")
        runner = self._runner_may("kueue.x-k8s.io", "localqueues", "list")
        found = default_queue(queues)
        if runner and found:
            return Check(name, "PASS", f"no LocalQueue {NAMED_DEFAULT}, but pipeline-runner may list LocalQueues: a run "
                                       f"without local_queue finds {found}")
        return Check(name, "WARN",
                     f"{self.ns} has no LocalQueue named {NAMED_DEFAULT}: a run started without local_queue from the "
                     f"dashboard or kfp.Client waits for LocalQueue {NAMED_DEFAULT}, which does not exist, until its "
                     "admission_timeout" + (" (pipeline-runner may not list LocalQueues to find "
                                            f"{found or 'another'})" if runner is False else ""),
                     f"set local_queue={found or '<name>'} on such runs (kfp-ray run/submit/schedule pass it for you), "
                     f"create a LocalQueue named {NAMED_DEFAULT}, or let pipeline-runner read Kueue (part 1 of "
                     "deploy/rbac-kfp-ray.yaml)")

    def _runner_may(self, group: str, resource: str, verb: str) -> bool | None:
        """May the DSPA's pipeline-runner do it here (asked impersonating it); None if unknown."""
        from kubernetes import client

        dspa = self.dspa or (_dspa_names(self.api, self.ns) or ["dspa"])[0]
        api = client.ApiClient(self.api.configuration)
        api.set_default_header("Impersonate-User", f"system:serviceaccount:{self.ns}:pipeline-runner-{dspa}")
        try:
            review = client.AuthorizationV1Api(api).create_self_subject_access_review(
                {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                 "spec": {"resourceAttributes": {"namespace": self.ns, "group": group, "resource": resource,
                                                 "verb": verb}}}, _request_timeout=TIMEOUT)
        except Exception:  # noqa: BLE001 - may not impersonate it: unknown
            return None
        return bool(review.status.allowed)

    def cluster_queue_check(self) -> Check:
        if self.api is None or not self.cluster_queue:
            return Check("ClusterQueue", "SKIP", "no LocalQueue to follow")
        from kubernetes import client

        try:
            cq = client.CustomObjectsApi(self.api).get_cluster_custom_object(
                "kueue.x-k8s.io", "v1beta1", "clusterqueues", self.cluster_queue, _request_timeout=TIMEOUT)
        except Exception as exc:  # noqa: BLE001
            status = getattr(exc, "status", 0)
            if status == 403:
                return Check("ClusterQueue", "SKIP", f"{self.user} may not read ClusterQueues (cluster-scoped): "
                                                     "quota and usage not shown")
            if status == 404:
                return Check("ClusterQueue", "FAIL", f"the LocalQueue points at ClusterQueue {self.cluster_queue}, "
                                                     "which does not exist",
                             "ask the cluster admin to create it (with a ResourceFlavor and quota), or use another "
                             "LocalQueue")
            return Check("ClusterQueue", "FAIL", _why(exc), "")
        active = condition(cq, "Active")
        if active and active.get("status") == "False":
            return Check("ClusterQueue", "FAIL", f"{self.cluster_queue} is inactive: {active.get('reason')}: "
                                                 f"{active.get('message')}", "fix the ClusterQueue (its ResourceFlavors must exist)")
        return Check("ClusterQueue", "PASS", f"{self.cluster_queue}: {_quota(cq)}")

    # --- the data connection -----------------------------------------------------------
    def data_connection(self) -> tuple[Check, dict | None]:
        name = self.args.data_connection
        if self.api is None:
            return self._skipped("data connection"), None
        from kubernetes import client

        try:
            secret = client.CoreV1Api(self.api).read_namespaced_secret(name, self.ns, _request_timeout=TIMEOUT)
        except Exception as exc:  # noqa: BLE001
            if getattr(exc, "status", 0) == 404:
                return Check("data connection", "FAIL", f"secret {name} does not exist in {self.ns}",
                             "create an S3 connection in the project (OpenShift AI dashboard > Connections) or pass "
                             "--data-connection / data_connection=<its secret>"), None
            return Check("data connection", "FAIL", _why(exc), ""), None
        values = secret_values(secret)
        missing = [k for k in KEYS if not values.get(k)]
        if missing:
            return Check("data connection", "FAIL", f"secret {name} lacks {', '.join(missing)}",
                         "edit the connection so it has endpoint, bucket and both keys"), None
        return Check("data connection", "PASS", f"secret {name}: endpoint {values['AWS_S3_ENDPOINT']}, "
                                                f"bucket {values['AWS_S3_BUCKET']}"), values

    def bucket(self, values: dict | None) -> Check:
        if values is None:
            return Check("bucket", "SKIP", "no usable data connection")
        import boto3
        from botocore.config import Config

        bucket = values["AWS_S3_BUCKET"]
        s3 = boto3.client("s3", endpoint_url=values["AWS_S3_ENDPOINT"], aws_access_key_id=values["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=values["AWS_SECRET_ACCESS_KEY"],
                          region_name=values.get("AWS_DEFAULT_REGION") or "us-east-1",
                          config=Config(connect_timeout=TIMEOUT[0], read_timeout=TIMEOUT[1], s3={"addressing_style": "path"},
                                        retries={"max_attempts": 3, "mode": "standard"}))
        try:
            s3.head_bucket(Bucket=bucket)
        except Exception as exc:  # noqa: BLE001
            code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", "")) if hasattr(exc, "response") else ""
            if code in ("404", "NoSuchBucket"):
                return Check("bucket", "FAIL", f"bucket {bucket} does not exist at {values['AWS_S3_ENDPOINT']}",
                             "create it, or set AWS_S3_BUCKET in the connection to one that exists")
            if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                return Check("bucket", "FAIL", f"the connection's keys may not use bucket {bucket} ({code})",
                             "fix the access key and secret key in the connection")
            return Check("bucket", "FAIL", f"{values['AWS_S3_ENDPOINT']} did not answer: {_why(exc)}",
                         "check AWS_S3_ENDPOINT (from the cluster: the MinIO service or route)")
        return Check("bucket", "PASS", f"{bucket} reachable with the connection's keys")

    # --- the pipelines server ----------------------------------------------------------
    def route(self) -> Check:
        try:
            self.conn = connection.resolve(self.args)
        except connection.ConnectionProblem as exc:
            self.conn = None
            return Check("pipelines route", "FAIL", str(exc))
        self.dspa = next(iter(_dspa_names(self.api, self.ns)), "")
        return Check("pipelines route", "PASS", self.conn.host)

    def pipelines_api(self, route: Check) -> Check:
        if self.conn is None:
            return Check("pipelines API", "SKIP", "no route")
        try:
            connection.check(self.conn)
        except connection.ConnectionProblem as exc:
            return Check("pipelines API", "FAIL", str(exc))
        return Check("pipelines API", "PASS", f"healthz answered through the route's auth proxy ({self.conn.token_from or 'no token'})")

    # --- what the tasks may do ---------------------------------------------------------
    def runner_access(self) -> Check:
        name = "pipeline-runner access"
        if self.api is None:
            return self._skipped(name)
        from kubernetes import client

        from kfp_ray.kube import PIPELINE_RUNNER_NEEDS

        dspa = self.dspa or (_dspa_names(self.api, self.ns) or ["dspa"])[0]
        sa = f"system:serviceaccount:{self.ns}:pipeline-runner-{dspa}"
        api = client.ApiClient(self.api.configuration)
        api.set_default_header("Impersonate-User", sa)
        denied = []
        try:
            for group, resource, verb in PIPELINE_RUNNER_NEEDS:
                plural, _, sub = resource.partition("/")
                review = client.AuthorizationV1Api(api).create_self_subject_access_review(
                    {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                     "spec": {"resourceAttributes": {"namespace": self.ns, "group": group, "resource": plural,
                                                     "subresource": sub, "verb": verb}}}, _request_timeout=TIMEOUT)
                if not review.status.allowed:
                    denied.append(f"{verb} {resource}{'.' + group if group else ''}")
        except Exception as exc:  # noqa: BLE001
            if getattr(exc, "status", 0) == 403:
                return Check(name, "SKIP", f"{self.user} may not impersonate {sa}; a project admin can run doctor")
            return Check(name, "FAIL", _why(exc), "")
        if denied:
            return Check(name, "FAIL", f"pipeline-runner-{dspa} may not {', '.join(denied)}",
                         f"bind a Role granting them to {sa} (DSPO's pipeline-runner role has them)")
        return Check(name, "PASS", f"pipeline-runner-{dspa} may do all {len(PIPELINE_RUNNER_NEEDS)} things kfp-ray's tasks do")


    def _optional_read(self, name: str, group: str, resource: str, what: str, gives: str, lacks: str,
                       part: int) -> Check:
        """Whether pipeline-runner may list `resource`, a read kfp-ray uses where allowed: PASS
        saying what runs show with it, WARN saying what they lack and which part of
        deploy/rbac-kfp-ray.yaml adds it; never a failure."""
        if self.api is None:
            return self._skipped(name)
        may = self._runner_may(group, resource, "list")
        if may is None:
            return Check(name, "SKIP", f"could not ask whether pipeline-runner may list {what}")
        if may:
            return Check(name, "PASS", f"pipeline-runner may list {what}: {gives}")
        return Check(name, "WARN", f"pipeline-runner may not list {what}: {lacks}",
                     f"apply part {part} of deploy/rbac-kfp-ray.yaml (PROJECT and DSPA replaced)")

    def kueue_insight(self) -> Check:
        """What runs show of Kueue: with Workloads readable, the queue position, Kueue's reasons
        and the usage ledger's admitted resources; without, less (never a failure)."""
        return self._optional_read(
            "queue position and usage", "kueue.x-k8s.io", "workloads", "Kueue Workloads",
            "runs show their place in the queue and Kueue's reasons, and count usage from what Kueue admitted",
            "a queued run shows no position in its LocalQueue nor Kueue's reason, and its usage ledger counts the "
            "cluster's requests instead of what Kueue admitted", part=1)

    def run_events(self) -> Check:
        """Whether the task that follows the job may copy the run's events to S3 (events.jsonl)."""
        return self._optional_read(
            "run events", "", "events", "events",
            "each run's Kueue and KubeRay events are copied to logs/events.jsonl beside its job log",
            "runs copy their job log to S3 but not the Kueue and KubeRay events of their cluster", part=4)


def secret_values(secret) -> dict[str, str]:
    """A data connection secret's values (a kubernetes V1Secret), decoded: never to be printed."""
    import base64

    return {k: base64.b64decode(v).decode(errors="replace") for k, v in (secret.data or {}).items()}


def _dspa_names(api, ns: str) -> list[str]:
    if api is None:
        return []
    from kubernetes import client

    try:
        return [d["metadata"]["name"] for d in client.CustomObjectsApi(api).list_namespaced_custom_object(
            *connection.DSPA[:2], ns, connection.DSPA[2], _request_timeout=TIMEOUT)["items"]]
    except Exception:  # noqa: BLE001 - the route check says what is wrong
        return []


def _quota(cq: dict) -> str:
    """'cpu 2/8, memory 4Gi/32Gi' per flavor: usage against nominal quota."""
    used = {(f["name"], r["name"]): r.get("total", "0") for f in (cq.get("status") or {}).get("flavorsUsage") or []
            for r in f.get("resources") or []}
    parts = []
    for group in cq["spec"].get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            res = ", ".join(f"{r['name']} {used.get((flavor['name'], r['name']), '0')}/{r.get('nominalQuota', '0')}"
                            for r in flavor.get("resources") or [])
            parts.append(f"{flavor['name']}: {res} used")
    return "; ".join(parts) or "no quota"


def _why(exc: BaseException) -> str:
    import json

    body = getattr(exc, "body", None)
    if body:
        try:
            return f"{getattr(exc, 'status', '')} {json.loads(body).get('message', '')}".strip()
        except (TypeError, ValueError):
            pass
    text = str(exc).strip().splitlines()
    return (text[-1] if text else type(exc).__name__)[:200]

