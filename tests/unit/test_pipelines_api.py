"""The sandbox's Data Science Pipelines API through kfp.Client 2.17 (the real client), behind the
DSPA route's oauth-proxy: pipelines, versions, experiments, listing, errors, and what a missing
or wrong token gets."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from kfp_ray_sandbox.apiserver.http import HttpServer
from kfp_ray_sandbox.apiserver.rbac import Authenticator
from kfp_ray_sandbox.pipelines_api.server import OAuthProxy, PipelinesApi
from kfp_ray_sandbox.raynode import free_port

ROOT = Path(__file__).resolve().parents[2]
NS = "sandbox"


@pytest.fixture(scope="module")
def server():
    auth = Authenticator(NS)
    http = HttpServer(OAuthProxy(PipelinesApi(NS), auth, NS), port=free_port())
    http.start()
    yield http.url, auth
    http.stop()


@pytest.fixture(scope="module")
def client(server):
    import kfp

    url, auth = server
    return kfp.Client(host=url, existing_token=auth.admin.token)


def test_upload_list_get_versions_and_delete(client, tmp_path):
    package = str(ROOT / "compiled" / "xgboost_tune.yaml")
    pipeline = client.upload_pipeline(package, pipeline_name="xgb-a", description="first")
    assert pipeline.pipeline_id and pipeline.display_name == "xgb-a"
    assert client.get_pipeline_id("xgb-a") == pipeline.pipeline_id
    assert client.get_pipeline_id("nope") is None
    v2 = client.upload_pipeline_version(package, "xgb-a-v2", pipeline_id=pipeline.pipeline_id)
    versions = client.list_pipeline_versions(pipeline.pipeline_id).pipeline_versions
    assert [v.display_name for v in versions] == ["xgb-a", "xgb-a-v2"]
    got = client.get_pipeline_version(pipeline.pipeline_id, v2.pipeline_version_id)
    assert got.pipeline_spec["pipeline_spec"]["pipelineInfo"]["name"] == "xgboost-tune"  # with its platform spec
    assert "platform_spec" in got.pipeline_spec
    with pytest.raises(Exception) as exc:  # versions left: the real server refuses too
        client.delete_pipeline(pipeline.pipeline_id)
    assert getattr(exc.value, "status", None) == 400
    for v in versions:
        client.delete_pipeline_version(pipeline.pipeline_id, v.pipeline_version_id)
    client.delete_pipeline(pipeline.pipeline_id)
    with pytest.raises(Exception) as exc:
        client.get_pipeline(pipeline.pipeline_id)
    assert exc.value.status == 404 and json.loads(exc.value.body)["code"] == 5


def test_a_second_pipeline_of_the_same_name_is_refused(client):
    package = str(ROOT / "compiled" / "ray_training.yaml")
    client.upload_pipeline(package, pipeline_name="dup")
    with pytest.raises(Exception) as exc:
        client.upload_pipeline(package, pipeline_name="dup")
    assert exc.value.status == 409


def test_experiments_created_once_and_found_by_name(client):
    first = client.create_experiment("team-a", description="d")
    again = client.create_experiment("team-a")  # kfp.Client reuses it (list with a filter first)
    assert again.experiment_id == first.experiment_id
    assert client.get_experiment(experiment_name="team-a").experiment_id == first.experiment_id
    client.archive_experiment(first.experiment_id)
    assert client.get_experiment(experiment_id=first.experiment_id).storage_state == "ARCHIVED"
    names = [e.display_name for e in client.list_experiments(page_size=100).experiments]
    assert "Default" in names and "team-a" in names


def test_paging_and_filters(client):
    package = str(ROOT / "compiled" / "kfp_ray_gc.yaml")
    for i in range(5):
        client.upload_pipeline(package, pipeline_name=f"page-{i}")
    seen, token = [], ""
    flt = json.dumps({"predicates": [{"key": "display_name", "operation": "IS_SUBSTRING", "string_value": "page-"}]})
    while True:
        page = client.list_pipelines(page_size=2, page_token=token, filter=flt, sort_by="display_name desc")
        seen += [p.display_name for p in page.pipelines]
        assert page.total_size == 5
        token = page.next_page_token
        if not token:
            break
    assert seen == [f"page-{i}" for i in reversed(range(5))]
    with pytest.raises(Exception) as exc:
        client.list_pipelines(filter='{"predicates": [{"key": "name", "operation": "SOUNDS_LIKE", "string_value": "x"}]}')
    assert exc.value.status == 400


def test_bad_uploads_are_refused_before_anything_is_made(server, client, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("just: a mapping\n")
    with pytest.raises(Exception) as exc:
        client.upload_pipeline(str(bad), pipeline_name="bad")
    assert exc.value.status == 400 and client.get_pipeline_id("bad") is None


@pytest.mark.parametrize("token", [None, "not-a-token"])
def test_without_a_good_token_the_route_answers_the_login_page(server, token):
    """oauth-proxy: 403 and the sign-in HTML for JSON clients too; never the API."""
    url, _ = server
    headers = {"Accept": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(urllib.request.Request(f"{url}/apis/v2beta1/healthz", headers=headers), timeout=10)
    assert exc.value.code == 403
    assert exc.value.headers["Content-Type"].startswith("text/html")
    assert "<title>Log In</title>" in exc.value.read().decode()


def test_the_proxy_health_needs_no_token_and_start_redirects_to_oauth(server):
    url, _ = server
    assert urllib.request.urlopen(f"{url}/oauth/healthz", timeout=10).read() == b"OK"

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as exc:
        opener.open(f"{url}/oauth/start?rd=/apis/v2beta1/runs", timeout=10)
    assert exc.value.code == 302 and "/oauth/authorize?" in exc.value.headers["Location"]


def test_the_pipeline_runner_may_use_the_api(server):
    """RHOAI's pipeline-runner Role allows get on routes: its token passes the proxy's check."""
    import kfp

    url, auth = server
    assert kfp.Client(host=url, existing_token=auth.pipeline_runner.token).get_kfp_healthz().multi_user is False


def test_the_sandbox_serves_it_at_pipelines_api_with_its_ca(box):
    """`kfp-ray-sandbox up --json` and Sandbox.info name it; TLS with the sandbox's CA; the
    admin kubeconfig's token passes (an `oc login` user's)."""
    import kfp
    import yaml

    token = yaml.safe_load(Path(box.info["kubeconfig"]).read_text())["users"][0]["user"]["token"]
    client = kfp.Client(host=box.info["pipelines_api"], existing_token=token, ssl_ca_cert=box.info["ca_file"])
    assert box.info["pipelines_api"].startswith("https://")
    assert client.get_kfp_healthz().multi_user is False
    assert "Default" in [e.display_name for e in client.list_experiments().experiments]


@pytest.mark.parametrize("path", ["/apis/v2beta1/pipelines", "/apis/v2beta1/experiments"])
def test_a_body_that_is_not_a_json_object_is_refused(server, path):
    url, auth = server
    for body in (b"{not json", b"[1, 2]"):
        req = urllib.request.Request(url + path, data=body, method="POST",
                                     headers={"Authorization": f"Bearer {auth.admin.token}", "Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(req, timeout=10)
        assert exc.value.code == 400 and json.loads(exc.value.read())["code"] == 3

def test_runs_are_created_from_a_package_or_a_version_and_listed_by_experiment(client):
    package = str(ROOT / "compiled" / "ray_training.yaml")
    result = client.create_run_from_pipeline_package(package, arguments={"entrypoint": "python -c 'print(1)'"},
                                                     run_name="r1", experiment_name="runs-exp")
    run = client.get_run(result.run_id)
    assert run.display_name == "r1" and run.state == "PENDING" and run.runtime_config.parameters["entrypoint"]
    assert run.pipeline_spec["pipeline_spec"]["pipelineInfo"]["name"] == "ray-training"
    experiment = client.get_experiment(experiment_name="runs-exp")
    pipeline = client.upload_pipeline(package, pipeline_name="for-runs")
    [version] = client.list_pipeline_versions(pipeline.pipeline_id).pipeline_versions
    by_ref = client.run_pipeline(experiment.experiment_id, "r2", pipeline_id=pipeline.pipeline_id,
                                 version_id=version.pipeline_version_id, params={"entrypoint": "true"})
    assert by_ref.pipeline_version_reference.pipeline_version_id == version.pipeline_version_id
    names = [r.display_name for r in client.list_runs(experiment_id=experiment.experiment_id).runs]
    assert names == ["r1", "r2"]
    client.archive_run(by_ref.run_id)
    assert client.get_run(by_ref.run_id).storage_state == "ARCHIVED"
    client.delete_run(by_ref.run_id)
    with pytest.raises(Exception) as exc:
        client.get_run(by_ref.run_id)
    assert exc.value.status == 404


def test_a_run_without_a_name_or_a_spec_is_refused(server):
    url, auth = server
    for body, says in (({"display_name": ""}, "run name is empty"), ({"display_name": "x"}, "empty pipeline spec")):
        req = urllib.request.Request(f"{url}/apis/v2beta1/runs", data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {auth.admin.token}", "Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(req, timeout=10)
        assert exc.value.code == 400 and says in json.loads(exc.value.read())["message"]


def test_rhoai_3s_kube_rbac_proxy_asks_for_the_dspa_api_role_and_answers_in_plain_text():
    """RHOAI 3.x (DSPO rhoai-3.3): 401 without a known token, 403 naming the verb for one
    without datasciencepipelinesapplications/api (pipeline-runner has none), the API for one
    with it; the ignored paths need no token."""
    from kfp_ray_sandbox.pipelines_api.server import KubeRbacProxy

    auth = Authenticator(NS)
    http = HttpServer(KubeRbacProxy(PipelinesApi(NS), auth, NS), port=free_port())
    http.start()
    try:
        def get(path, token=None, method="GET"):
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            req = urllib.request.Request(f"{http.url}{path}", headers=headers, method=method)
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    return r.status, r.headers["Content-Type"], r.read().decode()
            except urllib.error.HTTPError as exc:
                return exc.code, exc.headers["Content-Type"], exc.read().decode()

        for token in (None, "not-a-token"):
            assert get("/apis/v2beta1/healthz", token)[:3] == (401, "text/plain; charset=utf-8", "Unauthorized\n")
        code, kind, text = get("/apis/v2beta1/pipelines", auth.pipeline_runner.token, method="POST")
        assert (code, kind) == (403, "text/plain; charset=utf-8")
        assert text == (f"Forbidden (user={auth.pipeline_runner.user}, verb=create, "
                        "resource=datasciencepipelinesapplications, subresource=api)\n")
        code, _, text = get("/apis/v2beta1/healthz", auth.admin.token)
        assert code == 200 and json.loads(text)  # the API itself
        assert get("/apis/v1beta1/healthz")[0] != 401  # --ignore-paths: the API answers, whatever it says
    finally:
        http.stop()
