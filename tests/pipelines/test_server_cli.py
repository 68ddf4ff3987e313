"""The command line against the sandbox's Data Science Pipelines server: upload (and a new
version), submit --wait (0 on success, 1 on failure), runs list/get/cancel, schedule, and a
clear error naming the fix for each way the connection goes wrong."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from kubernetes import client as k8s

from kfp_ray.pipelines import connection
from kfp_ray.pipelines.__main__ import main

from ..helpers import eventually, on_platforms

ROOT = Path(__file__).resolve().parents[2]


def test_upload_twice_makes_a_pipeline_then_a_new_version(server_env, kfp_client, capsys):
    assert main(["upload", "kfp_ray_gc", "--display-name", "gc-cli"]) == 0
    assert main(["upload", "kfp_ray_gc", "--display-name", "gc-cli", "--version", "v2"]) == 0
    out = capsys.readouterr().out
    assert "pipeline gc-cli (" in out and "version v2 (" in out
    pipeline_id = kfp_client.get_pipeline_id("gc-cli")
    versions = kfp_client.list_pipeline_versions(pipeline_id).pipeline_versions
    assert sorted(v.display_name for v in versions) == ["gc-cli", "v2"]


def test_submit_wait_exits_0_on_success_and_1_on_failure_and_runs_get_lists_its_tasks(server_env, kfp_client, capsys):
    assert main(["submit", "kfp_ray_gc", "--experiment", "cli", "--wait"]) == 0
    out = capsys.readouterr().out
    run_id = out.split("submitted run ", 1)[1].split()[0]
    assert "==> sweep-ray-clusters: SUCCEEDED" in out and f"run {run_id} SUCCEEDED" in out
    # pipeline-runner may not list RayClusters in another namespace: the task, and the run, fail
    assert main(["submit", "kfp_ray_gc", "--experiment", "cli", "--param", "namespace=kube-system", "--wait"]) == 1
    out = capsys.readouterr().out
    failed = out.split("submitted run ", 1)[1].split()[0]
    # KFP's API says which task failed, not why: the CLI names it and where its log is
    assert f"run {failed} FAILED (failed: sweep-ray-clusters; their logs: kubectl logs -l pipeline/runid={failed})" in out
    experiments = kfp_client.list_experiments(page_size=100).experiments
    assert [e.display_name for e in experiments].count("cli") == 1  # created once, then reused

    assert main(["runs", "list", "--experiment", "cli"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].startswith(failed) and "FAILED" in listed[0] and listed[1].startswith(run_id)  # newest first
    assert main(["runs", "get", run_id]) == 0
    got = capsys.readouterr().out
    assert f"run {run_id}" in got and "SUCCEEDED" in got and "sweep-ray-clusters" in got


def test_runs_cancel_terminates_a_run_and_its_exit_handler_releases_the_cluster(box, sbx, server_env, kfp_client, capsys):
    # no local_queue: submit passes the project's default (annotated; pipeline-runner could not find it)
    assert main(["submit", "ray_training", "--experiment", "cli", "--param", "entrypoint=sleep 600",
                 "--param", "num_workers=0", "--param", "head_memory=2Gi"]) == 0
    out = capsys.readouterr().out
    assert f"==> local_queue={box.info['local_queue']}: the default LocalQueue of sandbox (annotated" in out
    run_id = out.split("submitted run ", 1)[1].split()[0]
    assert kfp_client.get_run(run_id).runtime_config.parameters["local_queue"] == box.info["local_queue"]
    assert main(["runs", "cancel", run_id, "--wait"]) == 0
    assert f"run {run_id} FAILED" in capsys.readouterr().out  # KFP on Argo: a terminated run ends FAILED
    co = k8s.CustomObjectsApi(sbx.api_client())
    eventually(lambda: not co.list_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters",
                                                            label_selector=f"kfp-ray.io/run-id={run_id}")["items"],
               timeout=60, what="the run's RayCluster gone")


def test_schedule_creates_a_recurring_run_and_refuses_a_5_field_cron_before_sending(server_env, kfp_client, capsys):
    assert main(["schedule", "kfp_ray_gc", "--cron", "0 */5 * * *"]) == 2
    assert "has 5 fields; KFP needs 6, seconds first (e.g. '0 0 */5 * * *'" in capsys.readouterr().err
    assert main(["schedule", "kfp_ray_gc", "--every", "5m", "--max-concurrency", "11"]) == 2
    assert main(["schedule", "kfp_ray_gc", "--cron", "0 0 3 * * *", "--no-catchup", "--schedule-name", "nightly-gc"]) == 0
    rr_id = capsys.readouterr().out.split("recurring run ", 1)[1].split(":")[0]
    try:
        rr = kfp_client.get_recurring_run(rr_id)
        assert (rr.display_name, rr.trigger.cron_schedule.cron, rr.no_catchup, rr.max_concurrency, rr.status) == \
            ("nightly-gc", "0 0 3 * * *", True, "1", "ENABLED")
    finally:
        kfp_client.delete_recurring_run(rr_id)
    # a training pipeline's schedule gets the project's default queue, as submit's runs do
    assert main(["schedule", "ray_training", "--cron", "0 0 3 1 1 *", "--param", "entrypoint=python t.py"]) == 0
    rr_id = capsys.readouterr().out.split("recurring run ", 1)[1].split(":")[0]
    try:
        assert kfp_client.get_recurring_run(rr_id).runtime_config.parameters["local_queue"] == "local-queue-test"
    finally:
        kfp_client.delete_recurring_run(rr_id)


# --- each way the connection goes wrong, said with its fix -------------------------------------
def conn(box, token, ca=True, host=None) -> connection.Connection:
    return connection.Connection(host or box.info["pipelines_api"], token, box.info["ca_file"] if ca else None, "a test")


@on_platforms("rhoai-2.25")
def test_no_token_or_a_refused_one_gets_the_login_page_explained(box):
    """RHOAI 2.x's oauth-proxy answers the login page, never a 401."""
    for token in (None, "sha256~expired-or-revoked-token"):
        with pytest.raises(connection.ConnectionProblem) as exc:
            connection.check(conn(box, token))
        assert "answered the OpenShift login page (HTTP 403), not the pipelines API" in str(exc.value)
        assert "oc login" in str(exc.value)
        assert ("was not accepted (expired, revoked" if token else "no token was sent") in str(exc.value)
        assert token is None or token not in str(exc.value)


def test_rhoai_3s_proxy_refuses_a_missing_or_unknown_token_and_forbids_a_task_account(box, sbx):
    """RHOAI 3.x's kube-rbac-proxy: 401 in plain text, each said with its fix; pipeline-runner
    (a task's account) has no datasciencepipelinesapplications/api rule: 403, named."""
    assert box.platform.pipelines_proxy == "kube-rbac-proxy"
    for token in (None, "sha256~expired-or-revoked-token"):
        with pytest.raises(connection.ConnectionProblem) as exc:
            connection.check(conn(box, token))
        assert "(401 Unauthorized)" in str(exc.value) and "oc login" in str(exc.value)
        assert token is None or token not in str(exc.value)
    with pytest.raises(connection.ConnectionProblem) as exc:
        connection.check(conn(box, sbx.token(as_pipeline_runner=True)))
    assert "(403: Forbidden (user=system:serviceaccount:sandbox:pipeline-runner-dspa, verb=get" in str(exc.value)
    assert "ds-pipeline-user-access-<dspa>" in str(exc.value)


def test_a_login_page_served_with_200_is_told_apart_from_the_api(box, tmp_path):
    """A client that follows the proxy's redirect ends on the login page with 200."""
    from werkzeug.serving import make_server

    from kfp_ray_sandbox.pipelines_api.server import LOGIN_PAGE

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
        return [LOGIN_PAGE.format(rd="/").encode()]

    server = make_server("127.0.0.1", 0, app)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(connection.ConnectionProblem, match=r"login page \(HTTP 200\)"):
            connection.check(conn(box, "t", host=f"http://127.0.0.1:{server.server_port}"))
    finally:
        server.shutdown()
        thread.join(10)


def test_an_untrusted_certificate_says_to_give_the_ca_bundle(box):
    with pytest.raises(connection.ConnectionProblem, match=r"TLS with .* failed .* give --ca-bundle"):
        connection.check(conn(box, "t", ca=False))


def test_a_bad_host_says_to_check_the_route(box):
    from kfp_ray_sandbox.raynode import free_port

    with pytest.raises(connection.ConnectionProblem, match=r"cannot reach https://127.0.0.1:\d+ .* check --host"):
        connection.check(conn(box, "t", host=f"https://127.0.0.1:{free_port()}"))


def test_the_command_line_says_the_problem_in_one_line_without_the_token(box, tmp_path):
    """As a user runs it: the token from a file, never argv; the error names the fix; exit 1."""
    token_file = tmp_path / "token"
    token_file.write_text("sha256~not-a-valid-token\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KFP_HOST": box.info["pipelines_api"],
           "KFP_CA_BUNDLE": box.info["ca_file"]}
    r = subprocess.run([sys.executable, "-m", "kfp_ray.pipelines", "runs", "list", "--token-file", str(token_file)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stderr.startswith("error: ") and "(401 Unauthorized)" in r.stderr, r.stderr
    assert "not-a-valid-token" not in r.stdout + r.stderr and "Traceback" not in r.stderr
    with pytest.raises(SystemExit) as exc:  # there is no option that takes the token itself
        main(["runs", "list", "--token", "sha256~x"])
    assert exc.value.code == 2
