"""The DSPA's API as its Route serves it: an auth proxy in front of KFP's v2beta1 REST API.

The proxy is RHOAI 2.x's oauth-proxy (openshift/oauth-proxy as the data-science-pipelines
operator deploys it, rhoai-2.25: --openshift-delegate-urls {"/": get routes/ds-pipeline-<dspa>}):
- a bearer token that passes the check goes through to the API;
- no token, an unknown token, or one the check denies: 403 with the HTML "Log In" page and a
  cleared `_oauth_proxy` cookie, whatever the Accept header (oauthproxy.go Proxy/SignInPage);
  there is no 401. kfp.Client raises nothing for it (an HTML body reads as an empty model, or a
  403 ApiException), so callers must tell a login page from the API;
- /oauth/healthz answers 200 "OK" unauthenticated; /oauth/start redirects to the cluster's
  OAuth server.
RHOAI 3.x's is kube-rbac-proxy (KubeRbacProxy; data-science-pipelines-operator rhoai-3.3,
config/internal/apiserver/default/deployment.yaml.tmpl and its kube-rbac-proxy ConfigMap):
- a SubjectAccessReview for the token's user on datasciencepipelinesapplications/api, named
  the DSPA, in its namespace, the verb from the HTTP method (GET get, POST create, PUT update,
  PATCH patch, DELETE delete); the pipeline-runner Role has no such rule, so a task's own
  account is refused;
- no token or an unknown one: 401 "Unauthorized"; denied: 403 "Forbidden (user=..., verb=...,
  resource=datasciencepipelinesapplications, subresource=api)", both text/plain;
- --ignore-paths /healthz, /apis/v1beta1/healthz, /metrics go through unauthenticated (not
  v2beta1's healthz, which kfp-ray's check therefore uses as the token's test).
"""

from __future__ import annotations

import json
import logging
from urllib.parse import quote

from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from ..apiserver.reviews import authorize
from . import listing
from .dag import DONE
from .store import PipelineStore, parse_package
from .wire import ApiError, invalid, read, to_json

log = logging.getLogger("sandbox.pipelines_api")
API = "/apis/v2beta1"
DSPA = "dspa"
ROUTE = f"ds-pipeline-{DSPA}"

LOGIN_PAGE = """<!DOCTYPE html>
<html lang="en" charset="utf-8">
<head><title>Log In</title></head>
<body>
<div class="signin center">
<form method="GET" action="/oauth/start">
<input type="hidden" name="rd" value="{rd}">
<button type="submit" class="btn">Log in with OpenShift</button><br/>
</form>
</div>
</body>
</html>
"""


def _rules() -> Map:
    r = [
        ("/healthz", "GET", "healthz"),
        ("/pipelines/upload", "POST", "upload_pipeline"),
        ("/pipelines/upload_version", "POST", "upload_version"),
        ("/pipelines", "POST", "create_pipeline"),
        ("/pipelines", "GET", "list_pipelines"),
        ("/pipelines/<pipeline_id>", "GET", "get_pipeline"),
        ("/pipelines/<pipeline_id>", "DELETE", "delete_pipeline"),
        ("/pipelines/<pipeline_id>/versions", "GET", "list_versions"),
        ("/pipelines/<pipeline_id>/versions/<version_id>", "GET", "get_version"),
        ("/pipelines/<pipeline_id>/versions/<version_id>", "DELETE", "delete_version"),
        ("/experiments", "POST", "create_experiment"),
        ("/experiments", "GET", "list_experiments"),
        ("/experiments/<experiment_id>", "GET", "get_experiment"),
        ("/experiments/<experiment_id>", "DELETE", "delete_experiment"),
        ("/experiments/<experiment_id>:archive", "POST", "archive_experiment"),
        ("/experiments/<experiment_id>:unarchive", "POST", "unarchive_experiment"),
        ("/runs", "POST", "create_run"),
        ("/runs", "GET", "list_runs"),
        ("/runs/<run_id>", "GET", "get_run"),
        ("/runs/<run_id>", "DELETE", "delete_run"),
        ("/runs/<run_id>:archive", "POST", "archive_run"),
        ("/runs/<run_id>:terminate", "POST", "terminate_run"),
        ("/recurringruns", "POST", "create_recurring_run"),
        ("/recurringruns", "GET", "list_recurring_runs"),
        ("/recurringruns/<recurring_run_id>", "GET", "get_recurring_run"),
        ("/recurringruns/<recurring_run_id>", "DELETE", "delete_recurring_run"),
        ("/recurringruns/<recurring_run_id>:enable", "POST", "enable_recurring_run"),
        ("/recurringruns/<recurring_run_id>:disable", "POST", "disable_recurring_run"),
        ("/runs/<run_id>:unarchive", "POST", "unarchive_run"),
    ]
    return Map([Rule(API + path, methods=[method], endpoint=name) for path, method, name in r])


class PipelinesApi:
    """The KFP API server (upstream of the proxy): a WSGI app."""

    def __init__(self, namespace: str, engine=None, server: str | None = None):
        """`engine` executes runs (workflow.Engine: start, terminate, delete); None: runs stay
        PENDING (the API alone, for tests of the API)."""
        self.store = PipelineStore(namespace, server)
        self.map = _rules()
        self.engine = engine
        self.scheduler = None  # schedule.Scheduler, started with the sandbox (start_scheduler)

    def start_scheduler(self):
        from .schedule import Scheduler

        self.scheduler = Scheduler(self.store, self.fire).start()
        return self.scheduler

    def __call__(self, environ, start_response):
        request = Request(environ)
        try:
            endpoint, args = self.map.bind_to_environ(environ).match()
            status, body = getattr(self, endpoint)(request, **args)
        except ApiError as exc:
            status, body = exc.http, exc.body()
        except (NotFound, MethodNotAllowed):
            status, body = 404, {"code": 5, "message": "Not Found", "details": []}
        except HTTPException as exc:
            status, body = exc.code or 400, {"code": 3, "message": exc.description, "details": []}
        return Response(json.dumps(body), status=status, content_type="application/json")(environ, start_response)

    # --- health ---------------------------------------------------------------------
    def healthz(self, request):
        return 200, to_json("V2beta1GetHealthzResponse", {"multi_user": False, "pipeline_store": "database"}) | {
            "commit_sha": "kfp-ray-sandbox", "tag_name": "2.17.0"}

    # --- pipelines ------------------------------------------------------------------
    def _package(self, request) -> tuple[dict, str]:
        upload = request.files.get("uploadfile")
        if upload is None:
            raise invalid("Failed to create a pipeline due to error parsing pipeline spec filename: "
                          "http: no such file (the multipart field is uploadfile)")
        return parse_package(upload.read().decode("utf-8", "replace"), upload.filename or ""), upload.filename or ""

    def upload_pipeline(self, request):
        spec, filename = self._package(request)
        q = request.args
        name = q.get("name") or q.get("display_name") or filename.rsplit(".", 1)[0]
        with self.store.lock:
            pipeline = self.store.create_pipeline(name, q.get("display_name", ""), q.get("description", ""),
                                                  q.get("namespace", ""))
            self.store.create_version(pipeline["pipeline_id"], name, spec, q.get("display_name", ""),
                                      q.get("description", ""))
        return 200, to_json("V2beta1Pipeline", pipeline)

    def upload_version(self, request):
        spec, filename = self._package(request)
        q = request.args
        pipeline_id = q.get("pipelineid", "")
        if not pipeline_id:
            raise invalid("Failed to create a pipeline version: pipeline id is empty (query parameter pipelineid)")
        name = q.get("name") or q.get("display_name") or filename.rsplit(".", 1)[0]
        version = self.store.create_version(pipeline_id, name, spec, q.get("display_name", ""), q.get("description", ""))
        return 200, to_json("V2beta1PipelineVersion", version)

    def create_pipeline(self, request):
        body = read("V2beta1Pipeline", request.get_data())
        name = body.get("name") or body.get("display_name") or ""
        pipeline = self.store.create_pipeline(name, body.get("display_name", ""), body.get("description", ""),
                                              body.get("namespace", ""))
        return 200, to_json("V2beta1Pipeline", pipeline)

    def list_pipelines(self, request):
        items, total, token = self._page(request, list(self.store.pipelines.values()),
                                         ("created_at", "name", "display_name", "pipeline_id"))
        return 200, to_json("V2beta1ListPipelinesResponse", {
            "pipelines": items, "total_size": total, "next_page_token": token})

    def get_pipeline(self, request, pipeline_id):
        return 200, to_json("V2beta1Pipeline", self.store.pipeline(pipeline_id))

    def delete_pipeline(self, request, pipeline_id):
        self.store.delete_pipeline(pipeline_id, cascade=request.args.get("cascade", "").lower() == "true")
        return 200, {}

    def list_versions(self, request, pipeline_id):
        self.store.pipeline(pipeline_id)
        versions = [v for v in self.store.versions.values() if v["pipeline_id"] == pipeline_id]
        items, total, token = self._page(request, versions, ("created_at", "name", "display_name", "pipeline_version_id"))
        return 200, to_json("V2beta1ListPipelineVersionsResponse", {
            "pipeline_versions": items, "total_size": total, "next_page_token": token})

    def get_version(self, request, pipeline_id, version_id):
        return 200, to_json("V2beta1PipelineVersion", self.store.version(pipeline_id, version_id))

    def delete_version(self, request, pipeline_id, version_id):
        self.store.delete_version(pipeline_id, version_id)
        return 200, {}

    # --- experiments ----------------------------------------------------------------
    def create_experiment(self, request):
        body = read("V2beta1Experiment", request.get_data())
        return 200, to_json("V2beta1Experiment", self.store.create_experiment(body))

    def list_experiments(self, request):
        items, total, token = self._page(request, list(self.store.experiments.values()),
                                         ("created_at", "display_name", "experiment_id"))
        return 200, to_json("V2beta1ListExperimentsResponse", {
            "experiments": items, "total_size": total, "next_page_token": token})

    def get_experiment(self, request, experiment_id):
        return 200, to_json("V2beta1Experiment", self.store.experiment(experiment_id))

    def delete_experiment(self, request, experiment_id):
        with self.store.lock:
            self.store.experiment(experiment_id)
            del self.store.experiments[experiment_id]
        return 200, {}

    def archive_experiment(self, request, experiment_id):
        self.store.experiment(experiment_id)["storage_state"] = "ARCHIVED"
        return 200, {}

    def unarchive_experiment(self, request, experiment_id):
        self.store.experiment(experiment_id)["storage_state"] = "AVAILABLE"
        return 200, {}

    # --- runs (executed by `self.engine`, workflow.Engine, when there is one) ---------
    def create_run(self, request):
        run = self.store.create_run(read("V2beta1Run", request.get_data()))
        self._start(run)
        with self.store.lock:
            return 200, to_json("V2beta1Run", run)

    def _start(self, run: dict) -> None:
        """The run's Workflow is created (workflow.Engine.start); if it cannot be, the run is
        not kept (KFP stores a run only once its Workflow exists) and the caller gets why."""
        if self.engine is None:
            return
        try:
            self.engine.start(run)
        except ApiError:
            with self.store.lock:
                self.store.runs.pop(run["run_id"], None)
            raise

    def list_runs(self, request):
        runs = list(self.store.runs.values())
        if request.args.get("experiment_id"):
            runs = [r for r in runs if r["experiment_id"] == request.args["experiment_id"]]
        items, total, token = self._page(request, runs, ("created_at", "display_name", "run_id", "state"))
        return 200, to_json("V2beta1ListRunsResponse", {"runs": items, "total_size": total, "next_page_token": token})

    def get_run(self, request, run_id):
        with self.store.lock:
            return 200, to_json("V2beta1Run", self.store.run(run_id))

    def terminate_run(self, request, run_id):
        """KFP 2.17 TerminateRun: the run is CANCELING; the engine stops it (workflow.py)."""
        run = self.store.run(run_id)
        if run["state"] in DONE:
            raise ApiError("FAILED_PRECONDITION", f"Failed to terminate run {run_id}: the run has already finished")
        if self.engine is not None:
            self.engine.terminate(run_id)
        return 200, {}

    def delete_run(self, request, run_id):
        self.store.run(run_id)
        if self.engine is not None:
            self.engine.delete(run_id)
        with self.store.lock:
            self.store.runs.pop(run_id, None)
        return 200, {}

    def archive_run(self, request, run_id):
        self.store.run(run_id)["storage_state"] = "ARCHIVED"
        return 200, {}

    def unarchive_run(self, request, run_id):
        self.store.run(run_id)["storage_state"] = "AVAILABLE"
        return 200, {}

    # --- recurring runs (fired by schedule.Scheduler) --------------------------------------
    def create_recurring_run(self, request):
        rr = self.store.create_recurring_run(read("V2beta1RecurringRun", request.get_data()))
        if self.scheduler is not None:
            self.scheduler.wake.set()
        return 200, _recurring(rr)

    def list_recurring_runs(self, request):
        items = list(self.store.recurring_runs.values())
        if request.args.get("experiment_id"):
            items = [r for r in items if r["experiment_id"] == request.args["experiment_id"]]
        page, total, token = self._page(request, items, ("created_at", "display_name", "recurring_run_id"))
        return 200, to_json("V2beta1ListRecurringRunsResponse", {
            "recurring_runs": [_recurring(r) for r in page], "total_size": total, "next_page_token": token})

    def get_recurring_run(self, request, recurring_run_id):
        return 200, _recurring(self.store.recurring_run(recurring_run_id))

    def delete_recurring_run(self, request, recurring_run_id):
        """The ScheduledWorkflow goes; the runs it made stay, as in KFP."""
        with self.store.lock:
            self.store.recurring_run(recurring_run_id)
            del self.store.recurring_runs[recurring_run_id]
        return 200, {}

    def enable_recurring_run(self, request, recurring_run_id):
        self.store.set_recurring_run_enabled(recurring_run_id, True)
        if self.scheduler is not None:
            self.scheduler.wake.set()
        return 200, {}

    def disable_recurring_run(self, request, recurring_run_id):
        self.store.set_recurring_run_enabled(recurring_run_id, False)
        return 200, {}

    def fire(self, recurring_run: dict, scheduled_at) -> None:
        """A recurring run's scheduled time: a run, as the ScheduledWorkflow makes a Workflow."""
        rr = recurring_run
        body = {"display_name": f"{rr['display_name']}-{scheduled_at.strftime('%Y%m%d%H%M%S')}",
                "experiment_id": rr["experiment_id"], "runtime_config": rr["runtime_config"],
                "service_account": rr["service_account"], "pipeline_spec": rr.get("pipeline_spec"),
                "pipeline_version_reference": rr.get("pipeline_version_reference")}
        try:
            run = self.store.create_run({k: v for k, v in body.items() if v})
        except ApiError as exc:  # its version deleted: the controller records the failure and goes on
            log.warning("recurring run %s could not start a run: %s", rr["recurring_run_id"], exc.message)
            return
        with self.store.lock:
            run["recurring_run_id"] = rr["recurring_run_id"]
            run["scheduled_at"] = scheduled_at.strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            self._start(run)
        except ApiError as exc:  # the controller records the failure and goes on
            log.warning("recurring run %s could not start a run: %s", rr["recurring_run_id"], exc.message)

    # --- helpers --------------------------------------------------------------------
    def _page(self, request, items, sortable):
        q = request.args
        with self.store.lock:
            return listing.page(items, filter_text=q.get("filter", ""), sort_by=q.get("sort_by", ""),
                                page_size=q.get("page_size", "0"), page_token=q.get("page_token", ""), sortable=sortable)


def _recurring(rr: dict) -> dict:
    return to_json("V2beta1RecurringRun", {k: v for k, v in rr.items() if not k.startswith("_")})


class KubeRbacProxy:
    """RHOAI 3.x's kube-rbac-proxy in front of `upstream` (module docstring)."""

    IGNORED = ("/healthz", "/apis/v1beta1/healthz", "/metrics")
    VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}

    def __init__(self, upstream, authenticator, namespace: str, dspa: str = DSPA, policy=None):
        self.upstream, self.auth, self.namespace, self.dspa, self.policy = upstream, authenticator, namespace, dspa, policy

    def __call__(self, environ, start_response):
        request = Request(environ)
        if request.path in self.IGNORED:
            return self.upstream(environ, start_response)
        who = self.auth.identify(request.headers.get("Authorization"))
        if who is None:
            return Response("Unauthorized\n", status=401, content_type="text/plain; charset=utf-8")(environ, start_response)
        verb = self.VERBS.get(request.method, request.method.lower())
        allowed, _ = authorize(who, {"verb": verb, "group": "datasciencepipelinesapplications.opendatahub.io",
                                     "resource": "datasciencepipelinesapplications", "subresource": "api",
                                     "name": self.dspa, "namespace": self.namespace}, self.policy)
        if not allowed:
            text = (f"Forbidden (user={who.user}, verb={verb}, resource=datasciencepipelinesapplications, "
                    "subresource=api)\n")
            return Response(text, status=403, content_type="text/plain; charset=utf-8")(environ, start_response)
        return self.upstream(environ, start_response)


class OAuthProxy:
    """RHOAI 2.x's oauth-proxy in front of `upstream` (module docstring)."""

    def __init__(self, upstream, authenticator, namespace: str, oauth_server: str = "https://oauth-openshift.apps.sandbox",
                 policy=None):
        """policy: the RBAC objects applied to the API server (its SubjectAccessReview sees them)."""
        self.upstream = upstream
        self.auth = authenticator
        self.policy = policy
        self.namespace = namespace
        self.oauth_server = oauth_server

    def __call__(self, environ, start_response):
        request = Request(environ)
        path = request.path
        if path == "/oauth/healthz":
            return Response("OK", content_type="text/plain; charset=utf-8")(environ, start_response)
        if path == "/oauth/start":
            rd = request.args.get("rd", "/")
            rd = rd if rd.startswith("/") and not rd.startswith("//") else "/"
            client = quote(f"system:serviceaccount:{self.namespace}:{ROUTE}", safe="")
            location = (f"{self.oauth_server}/oauth/authorize?approval_prompt=force&client_id={client}"
                        f"&redirect_uri={quote(request.host_url + 'oauth/callback', safe='')}&response_type=code"
                        f"&scope=user%3Ainfo+user%3Acheck-access&state=sandbox%3A{quote(rd, safe='')}")
            return Response("", status=302, headers={"Location": location})(environ, start_response)
        who = self.auth.identify(request.headers.get("Authorization"))
        if who is None or not authorize(who, {"verb": "get", "group": "route.openshift.io", "resource": "routes",
                                              "namespace": self.namespace}, self.policy)[0]:
            page = LOGIN_PAGE.format(rd=request.full_path.rstrip("?").replace('"', "&quot;"))
            response = Response(page, status=403, content_type="text/html; charset=utf-8")
            response.set_cookie("_oauth_proxy", "", expires=0, path="/", secure=True, httponly=True)
            return response(environ, start_response)
        environ = dict(environ)
        environ.pop("HTTP_AUTHORIZATION", None)  # oauth-proxy passes the user, not the token, upstream
        environ["HTTP_X_FORWARDED_USER"] = who.user
        return self.upstream(environ, start_response)
