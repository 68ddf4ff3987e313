"""An entrypoint runs identically in lifecycle raycluster and lifecycle rayjob (issue 25 item 18).

The arrangement, faithful and cheap: every case runs on ONE head-only RayCluster (the module's
`ray_cluster`), once through the RayCluster path's submit (jobs.submit: Ray's job API, the head
runs `/bin/sh -c <entrypoint>`) and twice as KubeRay runs a K8sJobMode RayJob: the submitter
command of the RayJob kfp-ray hands KubeRay (rayjobs.build), as the sandbox's KubeRay builds it
(controllers/rayjob.py: GetK8sJobCommand, v1.4.2) for a job without embedded code and as
kfp-ray's own submitter template has it for embedded code, with the container's args expanded
as the kubelet expands them, run by real bash with the real `ray` CLI against that cluster. A
RayJob's own cluster would be the same head running the same `/bin/sh -c`: only the submission
path differs, and it is what mangles an entrypoint. One RayJob per case would start a Ray head
per case. Each case's output must equal, in all three, what the RayCluster path prints."""

from __future__ import annotations

import os
import re
import subprocess
import uuid

import pytest

from kfp_ray import jobs, rayjobs, tasks

pytestmark = pytest.mark.ray
GREETING = "hi  there"  # two blanks: an unquoted $GREETING and a quoted one differ
CASES = {
    "single-quotes": ("python -c 'print(\"rj-ok\")'", ["rj-ok"]),
    "double-quotes": ("echo \"say \\\"hi\\\" to 'them'\"", ["say \"hi\" to 'them'"]),
    "parentheses": ("(echo in a subshell) && python -c 'print((1, 2))'", ["in a subshell", "(1, 2)"]),
    "env-var": ("echo \"$GREETING\" ${GREETING}! \"[$NOT_SET]\"", [f"{GREETING} hi there! []"]),
    "backslashes": ("printf '%s\\n' 'a\\b' \"c\\\\d\" e\\\\f", ["a\\b", "c\\d", "e\\f"]),
    "and-and": ("test -f job.py && echo one && echo two", ["one", "two"]),
    "multi-line": ("x=1\nif [ \"$x\" = 1 ]; then\n  echo \"multi  line $x\"\nfi\n"
                   "python job.py a 'b c'", ["multi  line 1", "['a', 'b c']"]),
}
# Two submissions carry every case, each Ray job costing a job supervisor (and each submitter three
# `ray` CLI starts): the one-line cases joined by && (one entrypoint line, as most are) and the
# multi-line script. A case that a submission path mangles fails its group, its lines shown.
GROUPS = {"one-line": [c for c in CASES if "\n" not in CASES[c][0]], "multi-line": ["multi-line"]}
RAY_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\t[A-Z]+ job_manager\.py:\d+ -- ")


def output(logs: str, job_id: str, given: str) -> list[str]:
    """The job's output: its log without what Ray writes there itself: the runtime env's setup
    (a log record) and "Running entrypoint for job <id>: <the entrypoint Ray was given>", which
    differs by design and, being flushed when the entrypoint has started, may come after its
    first lines."""
    text = logs.replace(f"Running entrypoint for job {job_id}: {given}\n", "", 1)
    return [line for line in text.splitlines() if not RAY_RECORD.match(line)]


def submitter_command(rayjob: dict, dashboard: str, job_id: str) -> tuple[list[str], dict]:
    """The submitter container KubeRay starts for `rayjob` once its cluster is ready, and its env,
    as the sandbox's kubelet runs it (a Ray image: its `ray` first on PATH; $(VAR) expanded)."""
    from kfp_ray_sandbox import rayimage
    from kfp_ray_sandbox.controllers.kubelet import _expand
    from kfp_ray_sandbox.controllers.rayjob import submitter_template

    live = {**rayjob, "status": {"dashboardURL": dashboard.removeprefix("http://"), "jobId": job_id}}
    container = submitter_template(live)["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    env["PATH"] = rayimage.with_ray_cli() + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin")
    return [_expand(a, env) for a in container["command"] + container["args"]], env


def test_an_entrypoint_runs_the_same_in_both_lifecycles(ray_cluster, box, as_pipeline_runner, tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "job.py").write_text("import sys\nprint(sys.argv[1:])\n")
    url = ray_cluster.dashboard_url
    uri, data = jobs.package_working_dir("code", str(tmp_path))
    jobs.RayJobsClient(url).upload_package(uri, data, "of the test")
    runtime_env = jobs.build_runtime_env(uri, None, {"GREETING": GREETING})
    spec = tasks.cluster_spec("entry", "rj-entry", "run-ray-job", "1", "sandbox", "", "", None, None, None, None,
                              num_workers=0)
    runs, tag = {}, uuid.uuid4().hex[:6]
    for group, cases in GROUPS.items():
        entrypoint = " && ".join(CASES[c][0] for c in cases)
        runs[group, "raycluster"] = jobs.submit(url, entrypoint, f"entry-{tag}", group, working_dir="code",
                                                embedded_root=str(tmp_path), env_vars={"GREETING": GREETING})
        # KubeRay's submitter (code uploaded apart) and kfp-ray's own template (it splices the
        # entrypoint as KubeRay's command does, for embedded code)
        for variant, package in (("kuberay-submitter", None), ("kfp-ray-submitter", uri)):
            job_id = f"{group}-{variant}-{tag}"
            body = rayjobs.build(spec, "local-queue-test", entrypoint, runtime_env, job_id, "K8sJobMode", 600, 0,
                                 lease_seconds=600, package=package)
            assert bool(body["spec"].get("submitterPodTemplate")) == bool(package)
            command, env = submitter_command(body, url, job_id)
            runs[group, variant] = job_id, subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                                            stderr=subprocess.STDOUT, text=True)
    try:
        got = {}
        for (group, variant), run in runs.items():
            if variant != "raycluster":
                job_id, proc = run
                submitter_out = proc.communicate(timeout=240)[0]
                assert proc.returncode == 0, (group, variant, submitter_out)
                run = job_id
            logs = jobs.follow(url, run, timeout=240, echo=lambda line: None).logs
            got[group, variant] = output(logs, run, jobs.RayJobsClient(url).info(run)["entrypoint"])
    finally:
        for run in runs.values():
            if isinstance(run, tuple) and run[1].poll() is None:
                run[1].kill()
    for (group, variant), lines in got.items():
        assert lines == [line for c in GROUPS[group] for line in CASES[c][1]], (group, variant, lines)
