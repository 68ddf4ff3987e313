"""The fault matrix (issue 9): one kfp.local run of the real components on the sandbox per row,
each with one fault, each ending with the expected outcome and nothing left of its cluster: 0
RayClusters, 0 Workloads holding quota, 0 Ray processes. `python -m pytest tests/reliability`
prints the table (tests/reliability/conftest.py): fault, outcome, seconds to detect, seconds to
release quota, leaks.

How KFP is imitated (docs/lifecycle.md has the sources): a cancelled run (KFP 2.17 terminate:
Argo's deadline) sends SIGTERM to the running task's processes, whose container is gone about
1 s later (matrix.KILL_AFTER_S), then runs the exit handler; a deleted run kills everything and
runs no exit handler (SIGKILL of the whole local run here, the sweeper's case); a retry runs the
same task again with the same inputs (kfp.local does not retry, so the retry row runs the
components one at a time and kills each first attempt at its worst moment).

Rows run concurrently (tests/reliability/matrix.py); durations are real, the 3-minute outages
included. The whole matrix runs with Kueue's waitForPodsReady on (RHOAI 2.x ships it; a 3.x
administrator turns it on), its timings shortened: pods-ready timeout 150 s and requeue
backoff base 2 s (RHOAI: 300 s, 60 s); rows whose fault is not the start-up allow 240 s for it.
The preemption rows (issue 29) each run in a ClusterQueue of their own that preempts within
itself by priority, so that their preemptor takes only their cluster."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from kfp_ray_sandbox.reaper import pid_alive
from tests.helpers import KUEUE_API
from tests.opt_in import FULL, full_only
from tests.reliability.matrix import (
    COMPONENTS,
    PREEMPT_PIPELINE,
    RAYJOB_PIPELINE,
    Matrix,
    Row,
    audit,
    error_kind,
    exception_text,
    failed_task,
    gated_job,
    kill9,
    ray_jobs,
    task_block,
    terminate,
    ticking_job,
)

pytestmark = pytest.mark.ray
ROOT = Path(__file__).resolve().parents[2]
# Kueue's waitForPodsReady on, the harsher setting (RHOAI 2.x ships it; a 3.x administrator turns it on with the
# Kueue CR's gangScheduling.policy: ByWorkload); 150: a head took 90 s+ to start while the suite starts
PLATFORM = {"pods_ready_timeout_s": 150, "requeue_backoff_base_s": 2, "wait_for_pods_ready": True}
RUNNING = r"job \S+: RUNNING"


# --- rows: the job ----------------------------------------------------------------------------
def _job_fails(ctx, entrypoint: str) -> str:
    """Run a job that fails on its own; the run's log, with when it failed and was seen to."""
    watch = ctx.jobs()
    run = ctx.run(entrypoint=entrypoint)
    run.wait(240)
    ctx.t_fault = watch.ended()
    ctx.t_detect = run.log.first(r"JobFailed|job \S+: FAILED", after=ctx.t_fault or 0)
    return run.log.text()


def job_exits_nonzero(ctx):
    text = _job_fails(ctx, "python -c 'import sys; print(\"training diverged\", flush=True); sys.exit(3)'")
    assert "training diverged" in text and "exit code 3" in text, text[-3000:]


def job_exceeds_timeout(ctx):
    watch = ctx.jobs()
    run = ctx.run(entrypoint=ticking_job(600), job_timeout=5)
    run.wait(240)
    started = watch.started()
    ctx.t_fault = started + 5 if started else None
    ctx.t_detect = run.log.first(r"did not finish within", after=started or 0)
    assert re.search(r"did not finish within 5s and was stopped", run.log.text()), run.log.text()[-3000:]
    assert "STOPPED" in watch.seen or (watch.job or {}).get("status") == "STOPPED", watch.seen


def entrypoint_missing(ctx):
    text = _job_fails(ctx, "python train_missing.py --epochs 3")
    assert "train_missing.py" in text and re.search(r"No such file|can't open file", text), text[-3000:]


# --- rows: cancel (KFP terminate: SIGTERM to the running task, SIGKILL after the grace) -------
def _cancelled(ctx, run, task: str) -> dict:
    """Terminate the task as KFP 2.17 does (SIGTERM, its container gone 1 s later), let the run
    end (its exit handler runs after, as on KFP), and check that the cancelled task itself had
    its cluster deleted (the DELETE sent before the task was gone, before the exit handler
    started: an order of events, not a number of seconds): on a deleted run no exit handler would."""
    t = terminate(run.task_processes(task))
    ctx.t_fault = ctx.t_useless = t["sigterm"]
    ctx.kind = "cancelled"
    run.wait(240)
    deletes = [e for e in audit(ctx.box, ctx.cluster, "DELETE") if e["code"] in (200, 202) and e["ts"] >= t["sigterm"]]
    ctx.t_detect = deletes[0]["ts"] if deletes else None
    said = exception_text(task_block(run.log.text(), task)).splitlines()[:1]
    ctx.note(f"{task}: {'SIGKILLed' if t['killed'] else 'exited'} {t['exited'] - t['sigterm']:.1f}s after SIGTERM"
             + (f", saying {said[0][:80]!r}" if said else ""))
    exit_handler = run.log.first(r"Executing task 'teardown-ray-cluster'")
    assert failed_task(run.log.text()) == task, run.log.text()[-3000:]
    assert deletes, "nobody deleted the cluster"
    assert _sent(deletes[0]) <= t["exited"] and (exit_handler is None or deletes[0]["ts"] < exit_handler), (
        f"the cancelled {task} did not have its cluster deleted: the first DELETE came "
        f"{deletes[0]['ts'] - t['sigterm']:.1f}s after SIGTERM, {_sent(deletes[0]) - t['exited']:+.1f}s after the task was gone"
        + (f", {deletes[0]['ts'] - exit_handler:.1f}s after the exit handler started" if exit_handler else "")
        + "; a deleted run has no exit handler")
    return t


def _sent(entry: dict) -> float:
    """When a request reached the API server (its audit line is written as it is answered)."""
    return entry["ts"] - entry["ms"] / 1000.0


def cancel_while_queued(ctx):
    ctx.faults(never_admit=True)
    run = ctx.run()
    ctx.until(lambda: run.log.first(r"queued: waiting"), 120, "provision to wait in the queue")
    _cancelled(ctx, run, "provision-ray-cluster")
    assert ctx.trace().admitted is None


def cancel_while_starting(ctx):
    ctx.faults(slow_start=300)
    run = ctx.run()
    ctx.until(lambda: ctx.trace().pod_seen and run.log.first(r"admitted by Kueue"), 120, "the pods to be starting")
    _cancelled(ctx, run, "provision-ray-cluster")


def cancel_while_create_in_flight(ctx):
    """SIGTERM while the create is in flight: the API server has created the cluster, its answer
    is on the way (held 30 s: a window no busy machine misses). The task must still have it
    deleted. That the answer had not come is read from the task's log, not from a clock."""
    ctx.faults(api_latency_ms={"ms": 30000, "verbs": ["create"], "after": True})
    run = ctx.run()
    run.task_pid("provision-ray-cluster")
    ctx.until(lambda: ctx.trace().created, 120, "the create to be carried out", interval=0.02)
    _cancelled(ctx, run, "provision-ray-cluster")
    assert not run.log.first(rf"RayCluster {ctx.cluster} created in"), "the create's answer arrived before the SIGTERM"


def cancel_while_job_runs(ctx):
    watch = ctx.jobs()
    run = ctx.run(entrypoint=ticking_job(600))
    watch.wait("RUNNING", 180)
    ctx.until(lambda: run.log.first(RUNNING), 120, "follow to see the job running")
    t = _cancelled(ctx, run, "follow-ray-job")
    ctx.note(f"job STOPPED seen {watch.seen['STOPPED'] - t['sigterm']:.1f}s after SIGTERM" if "STOPPED" in watch.seen
             else "job STOPPED not seen before the cluster went")


# --- rows: queueing and starting ---------------------------------------------------------------
def never_admitted(ctx):
    ctx.faults(never_admit=True)
    run = ctx.run(admission_timeout=8)
    run.wait(240)
    ctx.t_fault = ctx.trace().created
    ctx.t_detect = run.log.first(r"Task 'provision-ray-cluster' finished with status FAILURE")
    assert error_kind(run.log.text()) == "AdmissionTimeout", run.log.text()[-3000:]
    assert not ctx.trace().reserved_ever


def admitted_late(ctx):
    ctx.faults(never_admit=True)
    watch = ctx.jobs()
    run = ctx.run(admission_timeout=60)
    ctx.until(lambda: run.log.first(r"queued: waiting"), 120, "provision to wait in the queue")
    with ctx.idle():
        time.sleep(10)  # the fault: Kueue holds the cluster for 10 s
        ctx.clear_faults()  # at once, not once this row has its CPU slot back
        ctx.t_fault = time.time()
    run.wait(240)
    ctx.t_detect = run.log.first(r"admitted by Kueue", after=ctx.t_fault)
    ctx.t_useless = watch.ended()
    queued = run.result["tasks"]["provision-ray-cluster"]["parameterValues"]["queued_seconds"]
    assert queued >= 10, queued
    ctx.note(f"queued {queued:.0f}s of a 60 s admission_timeout")


def evicted_then_readmitted(ctx):
    """Pods not ready within Kueue's pods-ready timeout (150 s here): evicted, requeued, admitted
    again, and this time they start."""
    ctx.faults(slow_start=600)
    watch = ctx.jobs()
    # startup_timeout is summed over evictions: the pods-ready timeout spent before the
    # eviction, plus 180 s for a real start on a loaded machine (one took over 90 s while
    # three torch installs ran beside it)
    run = ctx.run(admission_timeout=240, startup_timeout=PLATFORM["pods_ready_timeout_s"] + 180, timeout=600)
    with ctx.idle():
        ctx.until(lambda: ctx.trace().evicted, PLATFORM["pods_ready_timeout_s"] + 90, "Kueue's PodsReadyTimeout eviction",
                  interval=0.05)
        ctx.clear_faults()  # before the requeue backoff (2 s) ends and the pods are made again
    ctx.t_fault = ctx.trace().evicted
    run.wait(600)
    ctx.t_detect = run.log.first(r"(?i)evict", after=ctx.t_fault)
    ctx.t_useless = watch.ended()
    assert ctx.t_detect is not None, "provision did not say it was evicted"


def cold_gpu_node(ctx):
    """A GPU worker on the pool's GPU node, which has never pulled the Ray image: its pull (200 s
    here) outlasts Kueue's pods-ready timeout (150 s), so Kueue evicts the cluster and requeues
    it; the pull goes on, and readmitted, its new worker starts on the now warm node."""
    from kfp_ray_sandbox.nodepool import GPU_TOLERATION

    ctx.faults(image_pull_s={"gpu-*": PLATFORM["pods_ready_timeout_s"] + 50})
    run = ctx.run(num_workers=1, worker_gpus=1, tolerations=[GPU_TOLERATION], admission_timeout=240,
                  startup_timeout=PLATFORM["pods_ready_timeout_s"] + 240, timeout=720)
    with ctx.idle():
        ctx.until(lambda: ctx.trace().evicted, PLATFORM["pods_ready_timeout_s"] + 90, "Kueue's PodsReadyTimeout eviction",
                  interval=0.5)
        ctx.t_fault = ctx.trace().evicted
        run.wait(720)
    ctx.t_detect = run.log.first(r"(?i)evict", after=ctx.t_fault)
    assert ctx.t_detect is not None, "provision did not say it was evicted"
    assert re.search(r"pods on nodes: head worker-\d, worker gpu-worker-0", run.log.text()), run.log.text()[-3000:]


def _fails_at_start(ctx, expect: str, **faults):
    """A fault that keeps the pods from ever starting: the task says what and fails at once,
    not at its startup timeout (90 s)."""
    ctx.faults(**faults)
    run = ctx.run(startup_timeout=90)
    run.wait(240)
    tr = ctx.trace()
    ctx.t_fault = tr.pod_seen or tr.admitted
    ctx.t_detect = run.log.first(r"Task 'provision-ray-cluster' finished with status FAILURE")
    error = exception_text(task_block(run.log.text(), "provision-ray-cluster"))
    assert failed_task(run.log.text()) == "provision-ray-cluster", run.log.text()[-3000:]
    assert re.search(expect, error), error
    assert "StartupTimeout" not in error, f"failed by its startup timeout, {ctx.t_detect - ctx.t_fault:.0f}s after the fault"


def image_pull_user(ctx):
    _fails_at_start(ctx, r"ImagePullBackOff|ErrImagePull", image_pull=True)


def image_pull_auth_sidecar(ctx):
    sidecar = ctx.box.platform.head_sidecar  # kube-rbac-proxy on RHOAI 3.x
    _fails_at_start(ctx, rf"{sidecar}.*(ImagePullBackOff|ErrImagePull)|(ImagePullBackOff|ErrImagePull).*{sidecar}",
                    image_pull=sidecar)


def untolerated_taint(ctx):
    _fails_at_start(ctx, r"untolerated taint", taint=True)


def replica_failure(ctx):
    _fails_at_start(ctx, r"exceeded quota|ReplicaFailure|FailedCreateHeadPod", exceed_quota=True)


def head_crash(ctx):
    watch = ctx.jobs()
    run = ctx.run(entrypoint=ticking_job(600))
    watch.wait("RUNNING", 180)
    ctx.until(lambda: run.log.first(RUNNING), 120, "follow to see the job running")
    ctx.t_fault = ctx.t_useless = time.time()
    ctx.client.crash_head(ctx.cluster)
    run.wait(300)
    ctx.t_detect = run.log.first(r"Task 'follow-ray-job' finished with status FAILURE")
    error = exception_text(task_block(run.log.text(), "follow-ray-job"))
    job_id = watch.job["submission_id"]
    assert failed_task(run.log.text()) == "follow-ray-job" and job_id in error, error or run.log.text()[-3000:]


# --- rows: the dashboard unreachable mid-job (sandbox fault dashboard_outage) -----------------
def dashboard_outage(mode: str, seconds: int, job_ends: str):
    """The head Service's dashboard port refuses (or hangs) connections for `seconds` while the
    job runs, and the job ends during the outage or after it (`job_ends`): the job survives,
    follow rides the outage out and the run succeeds with the job's whole log."""
    def drive(ctx):
        gate = ctx.run_dir / "gate"
        watch = ctx.jobs()
        run = ctx.run(entrypoint=gated_job(gate), timeout=seconds + 400)
        watch.wait("RUNNING", 180)
        ctx.until(lambda: run.log.first(RUNNING), 120, "follow to see the job running")
        ctx.faults(dashboard_outage={"mode": mode, "for_s": seconds})
        outages = lambda: [o for o in ctx.box.proxy.outages() if o["cluster"] == ctx.cluster]  # noqa: E731
        ctx.t_fault = ctx.until(outages, 10, "the outage to begin")[0]["started"]
        with ctx.idle():
            if job_ends == "during":
                ctx.until(lambda: time.time() >= ctx.t_fault + seconds / 2, seconds, "the middle of the outage", interval=0.5)
                gate.touch()
            ended = ctx.until(lambda: outages()[0]["ended"], seconds + 30, "the outage to end", interval=0.5)
        gate.touch()
        run.wait(seconds + 300)
        ctx.t_detect = run.log.first(r"(?i)unreachable|transient|retry|refused|timed out|timeout|outage", after=ctx.t_fault)
        ctx.t_useless = watch.ended()
        lasted = ended - ctx.t_fault
        assert run.status == "SUCCESS", f"the run failed {lasted:.0f}s into a {seconds}s outage:\n{run.log.text()[-3000:]}"
        assert lasted >= seconds - 1, f"the outage lasted {lasted:.1f}s"
        out = run.result["tasks"]["follow-ray-job"]["parameterValues"]
        assert out["status"] == "SUCCEEDED" and "ticks done" in run.log.text(), run.log.text()[-3000:]
        ctx.note(f"{mode} {lasted:.0f}s; the job ended {job_ends} the outage")
    return drive


# --- rows: the Kubernetes API failing -----------------------------------------------------------
def api_burst(kind: str):
    """A burst of 3 (503s, 429s, or connection resets) on the cluster's create, then on its
    readiness polls, then on its delete: the run succeeds, every injected fault delivered."""
    key = "api_resets" if kind == "reset" else "api_errors"

    def spec(verbs, count=3):
        return {"count": count, "verbs": verbs, **({} if kind == "reset" else {"code": int(kind)})}

    def drive(ctx):
        ctx.faults(**{key: [spec(["create"]), spec(["delete"])]})
        watch = ctx.jobs()
        run = ctx.run(entrypoint=ticking_job(3))
        ctx.until(lambda: ctx.trace().created, 120, "the cluster to be created")
        ctx.faults(**{key: [spec(["create"], 0), spec(["get"]), spec(["delete"])]})
        run.wait(300)
        left = [s["count"] for s in ctx.fault_state()[key]]
        hit = [e for e in audit(ctx.box, ctx.cluster) if e["code"] in (0, 429, 500, 503)]
        ctx.t_fault = hit[0]["ts"] if hit else None
        ctx.t_detect = run.log.first(r"transient error", after=ctx.t_fault or 0)
        ctx.t_useless = watch.ended()
        ctx.note(f"{len(hit)} faulted requests on the cluster by name (+3 on its create)")
        assert left == [0, 0, 0], f"faults not delivered (create, get, delete): {left}"
    return drive


def api_latency(ctx):
    ctx.faults(api_latency_ms=1500)
    watch = ctx.jobs()
    run = ctx.run(entrypoint=ticking_job(3))
    run.wait(300)
    slow = [e for e in audit(ctx.box, ctx.cluster) if e["ms"] >= 1500]
    ctx.t_useless = watch.ended()
    ctx.note(f"{len(slow)} requests on the cluster answered after >= 1.5 s")
    assert slow


def auth_failure(code: int):
    """A token the API server does not know (401), or a project where the service account has no
    role (403): the first task fails at once, naming what it was refused, and creates nothing."""
    def drive(ctx):
        cfg = yaml.safe_load(Path(ctx.box.info["kubeconfig_pipeline_runner"]).read_text())
        if code == 401:
            cfg["users"][0]["user"]["token"] = "sha256~" + secrets.token_urlsafe(32)
        else:
            cfg["contexts"][0]["context"]["namespace"] = "default"
        path = ctx.run_dir / "kubeconfig"
        path.write_text(yaml.safe_dump(cfg))
        path.chmod(0o600)
        start = time.time()
        run = ctx.run(env={"KUBECONFIG": str(path)})
        run.wait(240)
        ctx.t_detect = run.log.first(r"Task 'provision-ray-cluster' finished with status FAILURE")
        # the requests refused until the task failed (one the task may take in its stride, e.g. a
        # LocalQueue read pipeline-runner may not do, then the one that fails it)
        refused = [e for e in _audit_since(ctx.box, start) if e["code"] == code and e["ts"] <= (ctx.t_detect or time.time())]
        ctx.t_fault = refused[-1]["ts"] if refused else None
        ctx.note("refused: " + ", ".join(f"{e['verb']} {e['path'].rsplit('/', 2)[-2]}" for e in refused))
        block = task_block(run.log.text(), "provision-ray-cluster")
        error = exception_text(block)
        assert failed_task(run.log.text()) == "provision-ray-cluster", run.log.text()[-3000:]
        assert refused, f"no request was refused with {code}"
        assert re.search(rf"{code}|{'Unauthorized' if code == 401 else 'Forbidden|forbidden'}", error), error
        assert re.search(r"\b(get|list|create|patch|delete|read|update)\b", error, re.I) and \
            re.search(r"rayclusters?|localqueues?|secrets?|services?|pods?", error, re.I), \
            f"the error does not name the verb and resource it was refused:\n{error}"
        assert "transient error" not in block, "a 401/403 was retried"
        again = [k for k, n in Counter((e["method"], e["path"]) for e in refused).items() if n > 1]
        assert not again, f"refused requests sent again: {again}"
        assert ctx.trace().created is None
    return drive


def _audit_since(box, t: float) -> list[dict]:
    import json

    with open(box.info["audit_log"]) as fh:
        return [e for e in (json.loads(line) for line in fh) if e["ts"] >= t]


# --- row: KFP retries every task once, each first attempt killed at its worst moment -----------
def retry_every_task(ctx):
    """kfp.local does not retry, so the run is played task by task, as KFP would retry it: each
    task's first attempt is SIGKILLed at its worst moment (after its side effect, before it
    reported), then the same task runs again with the same inputs and must adopt, not duplicate.
    follow leaves the deletion to teardown here (delete_cluster=False) so teardown's worst
    moment exists: killed after its delete was accepted, before the cluster was gone."""
    run_id = f"mx-retry-{secrets.token_hex(3)}"

    def twice(component: str, task: str, worst, then=None, **inputs):
        first = ctx.run(COMPONENTS[component], **inputs)
        pid = first.task_pid(task)
        ctx.until(lambda: worst(first), 180, f"{task}'s worst moment", interval=0.02)
        alive = pid_alive(pid)
        t = kill9(pid)
        first.wait(120)
        ctx.note(f"{task}: attempt 1 {'SIGKILLed' if alive else 'had returned before the kill'}")
        second = ctx.run(COMPONENTS[component], **inputs)
        if then is not None:  # let the retried attempt get somewhere first (follow: the job still running)
            ctx.until(lambda: then(second) or second.done, 180, f"{task}'s retry to get going")
        second.wait(300)
        assert second.status == "SUCCESS", second.log.text()[-3000:]
        return t, second.result["tasks"][task]["parameterValues"], second.log.text()

    t1, out, log = twice("provision_ray_cluster", "provision-ray-cluster", lambda _: ctx.trace().created,
                         run_id=run_id, cluster_name=ctx.cluster, local_queue="local-queue-test", num_workers=0,
                         head_cpu="1", head_memory="1Gi", admission_timeout=60, startup_timeout=240)
    ctx.t_fault = t1
    assert re.search(r"(?i)adopt", log), log[-3000:]
    assert len(ctx.trace().uids) == 1, f"the retry created another cluster: {ctx.trace().uids}"
    url = out["dashboard_url"]
    gate = ctx.run_dir / "gate"
    _, out, log = twice("submit_ray_job", "submit-ray-job", lambda _: ray_jobs(url, timeout=1),
                        dashboard_url=url, entrypoint=gated_job(gate), run_id=run_id, task_name="submit-ray-job")
    jobs = ray_jobs(url)
    assert [j["submission_id"] for j in jobs] == [out["job_id"]], jobs
    assert re.search(r"(?i)already submitted|adopt", log), log[-3000:]
    _, out, log = twice("follow_ray_job", "follow-ray-job", lambda first: first.log.first(RUNNING), dashboard_url=url,
                        job_id=out["job_id"], cluster_name=ctx.cluster, delete_cluster=False, max_poll_seconds=1.0,
                        then=lambda second: second.log.first(RUNNING) and gate.touch() is None)
    assert out["status"] == "SUCCEEDED" and "ticks done" in log, log[-3000:]
    assert len(ray_jobs(url)) == 1
    t4, out, log = twice("teardown_ray_cluster", "teardown-ray-cluster", lambda _: ctx.trace().delete_requested,
                         run_id=run_id, cluster_name=ctx.cluster, timeout=60)
    ctx.t_useless = t4
    assert len(ctx.trace().uids) == 1


def _expire_lease(ctx, plural: str, name: str) -> None:
    """Set an object's lease to the past, rather than waiting for it to run out."""
    from kubernetes import client as k8s

    past = (datetime.now(UTC) - timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    k8s.CustomObjectsApi(ctx.client.api_client()).patch_namespaced_custom_object(
        "ray.io", "v1", "sandbox", plural, name, {"metadata": {"annotations": {"kfp-ray.io/lease-expires": past}}})


def _gc(ctx) -> str:
    """One sweep (`kfp-ray gc --delete`) as pipeline-runner, as the kfp_ray_gc recurring run does it."""
    gc = subprocess.run([sys.executable, "-m", "kfp_ray.pipelines", "gc", "--namespace", "sandbox", "--delete"], cwd=ROOT,
                        capture_output=True, text=True, timeout=180,
                        env={**os.environ, "KUBECONFIG": ctx.box.info["kubeconfig_pipeline_runner"],
                             "PYTHONPATH": os.pathsep.join([str(ROOT / "runtime"), str(ROOT)])})
    assert gc.returncode == 0, gc.stdout + gc.stderr
    return gc.stdout


# --- row: kill -9 of follow, no exit handler: the lease sweeper ---------------------------------
def kill9_follow_no_exit_handler(ctx):
    """A deleted run: follow and the whole run are SIGKILLed, no exit handler runs, the cluster is
    left. Its lease runs out (set to the past here rather than waiting the default 10 min) and
    the sweeper frees it."""
    watch = ctx.jobs()
    run = ctx.run(entrypoint=ticking_job(600))
    watch.wait("RUNNING", 180)
    ctx.until(lambda: run.log.first(RUNNING), 120, "follow to see the job running")
    ctx.t_fault = ctx.t_useless = time.time()
    run.kill()
    run.wait(60)
    ctx.kind = "killed, swept"
    rc = ctx.monitor.clusters(ctx.cluster)
    assert rc, "the cluster went without a sweeper"
    lease = (rc[0]["metadata"].get("annotations") or {}).get("kfp-ray.io/lease-expires")
    assert lease, "the cluster carries no lease"
    _expire_lease(ctx, "rayclusters", rc[0]["metadata"]["name"])
    out = _gc(ctx)
    ctx.t_detect = time.time()
    assert ctx.cluster in out, out
    ctx.until(lambda: not ctx.monitor.clusters(ctx.cluster), 120, "the sweeper's deletion to complete")


# --- rows: lifecycle "rayjob" (run_ray_job: KubeRay creates, submits, deletes) -----------------
def rj_job_fails(ctx):
    watch = ctx.jobs()
    run = ctx.run(RAYJOB_PIPELINE, entrypoint="python -c 'import sys; print(\"training diverged\", flush=True); sys.exit(3)'")
    run.wait(240)
    ctx.t_fault = watch.ended()
    ctx.t_detect = run.log.first(r"JobFailed|job \S+: FAILED", after=ctx.t_fault or 0)
    text = run.log.text()
    assert failed_task(text) == "run-ray-job" and "training diverged" in text, text[-3000:]


def rj_deadline(ctx):
    """KubeRay's activeDeadlineSeconds (startup_timeout + job_timeout, from admission) ends a job
    that runs on: KubeRay marks it DeadlineExceeded and deletes the cluster; the task says so."""
    # The head must be ready within startup_timeout on a loaded machine (30 s was not, once, with
    # three suites running): the deadline is still reached while the job runs, not while starting.
    startup, job = 90, 15
    run = ctx.run(RAYJOB_PIPELINE, entrypoint=ticking_job(600), startup_timeout=startup, job_timeout=job)
    run.wait(300)
    # KubeRay's own clock: its message names the StartTime (whole seconds) the deadline counts from
    start = re.search(r"StartTime: (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", run.log.text())
    ctx.t_fault = ctx.t_useless = (datetime.strptime(start.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()
                                   + startup + job) if start else None
    ctx.t_detect = run.log.first(r"activeDeadlineSeconds\. StartTime")
    error = exception_text(task_block(run.log.text(), "run-ray-job"))
    assert "JobTimeout" in error and "The RayJob has passed the activeDeadlineSeconds" in error, error or run.log.text()[-3000:]


def rj_cancel_job_running(ctx):
    """KFP terminate during the job: the task stops the job and deletes the RayJob at once."""
    watch = ctx.jobs()
    run = ctx.run(RAYJOB_PIPELINE, entrypoint=ticking_job(600))
    watch.wait("RUNNING", 180)
    ctx.until(lambda: run.log.first(RUNNING), 120, "run_ray_job to see the job running")
    t = terminate(run.task_processes("run-ray-job"))
    ctx.t_fault = ctx.t_useless = t["sigterm"]
    ctx.kind = "cancelled"
    run.wait(240)
    deletes = [e for e in _audit_since(ctx.box, t["sigterm"]) if e["method"] == "DELETE"
               and e["path"].endswith(f"/rayjobs/{ctx.cluster}") and e["code"] in (200, 202)]
    ctx.t_detect = deletes[0]["ts"] if deletes else None
    assert failed_task(run.log.text()) == "run-ray-job", run.log.text()[-3000:]
    assert deletes and _sent(deletes[0]) <= t["exited"], (deletes[:1], t)  # sent by the cancelled task itself


def rj_kill9_swept_mid_job(ctx):
    """Issue 25 item 2. A deleted run while the job runs: every pipeline pod SIGKILLed (run_ray_job
    included), no exit handler. The RayJob's lease runs out (set to the past here) and a sweep
    runs while the job still runs: the sweeper leaves the RayJob to KubeRay. The job then ends by
    itself and KubeRay deletes the cluster (shutdownAfterJobFinishes, TTL 0): quota back with
    nobody from kfp-ray left. The finished RayJob (no quota) is the next sweep's."""
    gate = ctx.run_dir / "gate"
    watch = ctx.jobs()
    run = ctx.run(RAYJOB_PIPELINE, entrypoint=gated_job(gate), lease_seconds=60, renew_every_seconds=6)
    watch.wait("RUNNING", 180)
    run.kill()
    run.wait(60)
    killed = time.time()
    ctx.kind = "killed, swept mid-job, KubeRay deleted"
    _expire_lease(ctx, "rayjobs", ctx.cluster)
    out = _gc(ctx)
    assert re.search(rf"rayjob/{ctx.cluster}\s.*expired.*left to KubeRay", out), out
    assert ctx.monitor.rayjobs(ctx.cluster) and ctx.monitor.holding(ctx.cluster), "the sweep freed a running job's quota"
    assert [j["status"] for j in ray_jobs(f"{ctx.monitor.dashboard_url(ctx.cluster)}")] == ["RUNNING"]
    gate.touch()  # the job ends by itself
    ctx.until(lambda: watch.ended(), 120, "the job to end on its own")
    ctx.t_fault = ctx.t_useless = watch.ended()
    with ctx.idle():
        ctx.until(lambda: not ctx.monitor.clusters(ctx.cluster) and not ctx.monitor.holding(ctx.cluster), 120,
                  "KubeRay to delete the cluster and Kueue to release the quota")
    ctx.t_detect = ctx.monitor.of(f"{ctx.cluster}-")[0].delete_requested  # the cluster's, by KubeRay
    runner_deletes = [e for e in _audit_since(ctx.box, killed) if e["method"] == "DELETE" and ctx.cluster in e["path"]]
    assert runner_deletes == [], f"someone other than KubeRay deleted the cluster: {runner_deletes}"
    [rj] = ctx.monitor.rayjobs(ctx.cluster)
    assert rj["status"]["jobDeploymentStatus"] == "Complete" and rj["status"]["jobStatus"] == "SUCCEEDED", rj["status"]
    out = _gc(ctx)
    assert re.search(rf"rayjob/{ctx.cluster}\s.*deleted", out), out
    ctx.until(lambda: not ctx.monitor.rayjobs(ctx.cluster), 60, "the sweeper's deletion of the RayJob")


def rj_image_pull(ctx):
    ctx.faults(image_pull=True)
    run = ctx.run(RAYJOB_PIPELINE, startup_timeout=90)
    run.wait(240)
    tr = ctx.monitor.trace(ctx.monitor.cluster_name(ctx.cluster)) or ctx.trace()
    ctx.t_fault = tr.pod_seen or tr.admitted
    ctx.t_detect = run.log.first(r"Task 'run-ray-job' finished with status FAILURE")
    error = exception_text(task_block(run.log.text(), "run-ray-job"))
    assert re.search(r"ImagePullBackOff|ErrImagePull", error) and "PodsFailing" in error, error or run.log.text()[-3000:]


def rj_head_crash(ctx):
    watch = ctx.jobs()
    run = ctx.run(RAYJOB_PIPELINE, entrypoint=ticking_job(600))
    watch.wait("RUNNING", 180)
    ctx.until(lambda: run.log.first(RUNNING), 120, "run_ray_job to see the job running")
    ctx.t_fault = ctx.t_useless = time.time()
    ctx.client.crash_head(ctx.monitor.cluster_name(ctx.cluster))
    run.wait(300)
    ctx.t_detect = run.log.first(r"Task 'run-ray-job' finished with status FAILURE")
    assert failed_task(run.log.text()) == "run-ray-job", run.log.text()[-3000:]


# --- rows: Kueue preemption (issue 29): ridden out in both lifecycles ---------------------------
# Three rows repeat what these cover in every run (each preemption row costs two Ray starts while the
# whole matrix runs): they run with KFP_RAY_TEST_FULL=1
COVERED_RESUMED = ("tests/pipelines/test_run_preempted.py (fashion_mnist resumed from its checkpoint), the follow_ray_job "
                   "and run_ray_job test_preemption.py (ridden out, real Ray)")
COVERED_BUDGET = "the follow_ray_job and run_ray_job test_preemption.py (past max_preemptions: fails, nothing left)"
def checkpointing_job(ck: Path, gate: Path, hold: int, epochs: int = 4) -> str:
    """A job of `epochs` short epochs that checkpoints each one to `ck` (a file: Ray runs on this
    machine) with a KFP_RAY_CHECKPOINT line, resumes from it, and before epoch `hold` waits for
    `gate`: it cannot end before the test has preempted it, whatever the machine's speed."""
    return (f"python -c \"import os, time\nck, gate = '{ck}', '{gate}'\n"
            f"start = int(open(ck).read()) if os.path.exists(ck) else 0\nprint('starting at epoch', start, flush=True)\n"
            f"for e in range(start, {epochs}):\n    t = time.time()\n"
            f"    while e == {hold} and not os.path.exists(gate) and time.time() - t < 600:\n        time.sleep(0.1)\n"
            f"    time.sleep(0.2)\n    open(ck, 'w').write(str(e + 1))\n    print('KFP_RAY_CHECKPOINT epoch', e, flush=True)\n"
            f"print('KFP_RAY_METRICS {{\\\"epochs\\\": {epochs}}}', flush=True)\"")


@contextlib.contextmanager
def _own_queue(ctx):
    """The row's own ClusterQueue (1.5 CPU and 2 pods: room for its cluster, not for a second
    head), preempting within itself by priority, its LocalQueue, and the preemptor's fault (its
    pods never start Ray: it only takes the quota). A preemption takes this row's cluster only."""
    from kubernetes import client as k8s

    co = k8s.CustomObjectsApi(ctx.client.api_client())
    for name, value in (("mx-low", 100), ("mx-high", 1000)):
        with contextlib.suppress(k8s.ApiException):  # 409: another row made it
            co.create_cluster_custom_object(*KUEUE_API, "workloadpriorityclasses", {
                "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "WorkloadPriorityClass", "metadata": {"name": name},
                "value": value})
    cq, lq = f"cq-{ctx.cluster}", f"lq-{ctx.cluster}"
    co.create_cluster_custom_object(*KUEUE_API, "clusterqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": cq},
        "spec": {"namespaceSelector": {}, "preemption": {"withinClusterQueue": "LowerPriority"},
                 "resourceGroups": [{"coveredResources": ["cpu", "memory", "pods"], "flavors": [{
                     "name": "default-flavor", "resources": [{"name": "cpu", "nominalQuota": "1500m"},
                                                             {"name": "memory", "nominalQuota": "8Gi"},
                                                             {"name": "pods", "nominalQuota": 2}]}]}]}})
    co.create_namespaced_custom_object(*KUEUE_API, "sandbox", "localqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue", "metadata": {"name": lq, "namespace": "sandbox"},
        "spec": {"clusterQueue": cq}})
    ctx.client.patch_faults({"clusters": {f"hi-{ctx.cluster}": {"slow_start": 600}}})
    try:
        yield lq
    finally:
        with contextlib.suppress(Exception):
            co.delete_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", f"hi-{ctx.cluster}")
        ctx.client.patch_faults({"clusters": {f"hi-{ctx.cluster}": None}})
        with ctx.idle():
            ctx.until(lambda: not ctx.monitor.clusters(f"hi-{ctx.cluster}"), 60, "the preemptor to be gone")
        with contextlib.suppress(Exception):
            co.delete_namespaced_custom_object(*KUEUE_API, "sandbox", "localqueues", lq)
        with contextlib.suppress(Exception):
            co.delete_cluster_custom_object(*KUEUE_API, "clusterqueues", cq)


def _preempt(ctx, lq: str, victim: str) -> float:
    """A higher-priority cluster in the row's queue takes the quota; returns when it was created,
    once Kueue has suspended `victim` and KubeRay has stopped its pods."""
    from kubernetes import client as k8s

    from tests.helpers import labelled, raycluster

    co = k8s.CustomObjectsApi(ctx.client.api_client())
    body = labelled(raycluster(f"hi-{ctx.cluster}", workers=0, cpu="1", memory="1Gi"), "mx-high")
    body["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = lq
    co.create_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", body)
    created = time.time()
    def stopped() -> bool:  # suspended, or already deleted by a task that gave up
        objs = ctx.monitor.clusters(victim) + ctx.monitor.rayjobs(victim)
        return not objs or any((o.get("status") or {}).get("state") == "suspended"
                               or (o.get("status") or {}).get("jobDeploymentStatus") == "Suspended"
                               or o["metadata"].get("deletionTimestamp") for o in objs)

    with ctx.idle():
        ctx.until(stopped, 120, f"Kueue to preempt {victim}")
    co.delete_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", f"hi-{ctx.cluster}")
    return created


def _preempted_run(ctx, hold: int, target: str = PREEMPT_PIPELINE, **arguments):
    """A run of the checkpointing job preempted once it waits at epoch `hold`; the gate then opens."""
    gate, ck = ctx.run_dir / "gate", ctx.run_dir / "ck"
    with _own_queue(ctx) as lq:
        # admission_timeout: a bound (re-admission waits for the preemptor's pods to end, slower while
        # the whole matrix runs), not a wait
        run = ctx.run(target, entrypoint=checkpointing_job(ck, gate, hold), local_queue=lq, priority_class="mx-low",
                      timeout=600, admission_timeout=300, **arguments)
        ctx.until(lambda: run.log.first(r"starting at epoch 0$"), 240, "the job to start")
        if hold:
            ctx.until(lambda: run.log.first(rf"KFP_RAY_CHECKPOINT epoch {hold - 1}\b"), 60, "the job's checkpoint")
        ctx.t_fault = _preempt(ctx, lq, ctx.cluster)
        gate.touch()  # the job's next run goes on past `hold`
        run.wait(600)
    ctx.t_detect = run.log.first(r"Kueue suspended (RayCluster|RayJob)", after=ctx.t_fault)
    return run


def _ridden_out(ctx, run, task: str, resumed_at: int) -> None:
    starts = re.findall(r"(?m)starting at epoch (\d+)$", run.log.text())  # the job's lines, not its source's
    assert starts == ["0", str(resumed_at)], (starts, run.log.text()[-3000:])
    metrics = run.result["tasks"][task]["artifacts"]["metrics"]["artifacts"][0]["metadata"]
    assert metrics["preemptions"] == 1 and metrics["epochs"] == 4, metrics
    ctx.note(f"resumed at epoch {resumed_at}; lost {metrics['preempted_seconds']:.0f}s")


def preempted_resumed(ctx):
    """Preempted after two checkpoints: the job runs again on the cluster's new pods and resumes at
    epoch 2; the work lost is at most the time since the last checkpoint plus the wait."""
    run = _preempted_run(ctx, hold=2)
    _ridden_out(ctx, run, "follow-ray-job", resumed_at=2)
    checkpointed, back = run.log.first(r"KFP_RAY_CHECKPOINT epoch 1\b"), run.log.first(r"is ready again")
    lost = run.result["tasks"]["follow-ray-job"]["artifacts"]["metrics"]["artifacts"][0]["metadata"]["preempted_seconds"]
    assert lost <= back - checkpointed + 2, (lost, back - checkpointed)


def preempted_before_checkpoint(ctx):
    """Preempted before the job's first checkpoint: it starts over, and succeeds."""
    _ridden_out(ctx, _preempted_run(ctx, hold=0), "follow-ray-job", resumed_at=0)


def preempted_past_budget(ctx):
    """max_preemptions=0: the first preemption fails the run, naming it; the cluster is deleted."""
    run = _preempted_run(ctx, hold=2, max_preemptions=0)
    error = exception_text(task_block(run.log.text(), "follow-ray-job"))
    assert "Preempted 1 time, more than max_preemptions=0" in error, error or run.log.text()[-3000:]


def preempted_while_starting(ctx):
    """Preempted while its pods start (provision's wait): provision waits for re-admission."""
    ctx.faults(slow_start=600)
    with _own_queue(ctx) as lq:
        run = ctx.run(PREEMPT_PIPELINE, local_queue=lq, priority_class="mx-low", timeout=600, admission_timeout=300)
        ctx.until(lambda: run.log.first(r"admitted by Kueue"), 240, "provision to see the cluster admitted")
        ctx.t_fault = _preempt(ctx, lq, ctx.cluster)
        ctx.clear_faults()  # its next pods start
        run.wait(600)
    ctx.t_detect = run.log.first(r"(?i)evicted|preempted", after=ctx.t_fault)
    assert ctx.t_detect is not None, "provision did not say it was preempted"


def rj_preempted_resumed(ctx):
    """The same in lifecycle rayjob: KubeRay runs the job again on a new cluster, resumed at epoch 2."""
    run = _preempted_run(ctx, hold=2, target=RAYJOB_PIPELINE)
    _ridden_out(ctx, run, "run-ray-job", resumed_at=2)


ROWS = [
    Row("outage_refuse_3min", "dashboard refuses connections 3 min mid-job", "SUCCESS",
        dashboard_outage("refuse", 180, "during"), early=True),
    Row("outage_hang_3min", "dashboard hangs connections 3 min mid-job", "SUCCESS",
        dashboard_outage("hang", 180, "during"), early=True),
    Row("evicted_readmitted", "evicted (PodsReadyTimeout), then readmitted", "SUCCESS", evicted_then_readmitted, early=True),
    Row("outage_refuse_30s", "dashboard refuses connections 30 s mid-job", "SUCCESS",
        dashboard_outage("refuse", 30, "after"), early=True),
    Row("outage_hang_30s", "dashboard hangs connections 30 s mid-job", "SUCCESS",
        dashboard_outage("hang", 30, "after"), early=True),
    Row("retry_every_task", "KFP retries every task once at its worst moment", "SUCCESS", retry_every_task, early=True),
    Row("job_exits_nonzero", "job exits non-zero", "FAILURE", job_exits_nonzero),
    Row("job_timeout", "job exceeds its timeout", "FAILURE", job_exceeds_timeout),
    Row("entrypoint_missing", "entrypoint missing", "FAILURE", entrypoint_missing),
    Row("cancel_queued", "cancel while queued", "FAILURE", cancel_while_queued, quota=False),
    Row("cancel_create_in_flight", "cancel while the create is in flight", "FAILURE", cancel_while_create_in_flight),
    Row("cancel_starting", "cancel while starting", "FAILURE", cancel_while_starting),
    Row("cancel_job_running", "cancel while the job runs", "FAILURE", cancel_while_job_runs),
    Row("never_admitted", "never admitted", "FAILURE", never_admitted, quota=False),
    Row("admitted_late", "admitted late (10 s) within budget", "SUCCESS", admitted_late),
    Row("image_pull_user", "image pull failure (Ray image)", "FAILURE", image_pull_user),
    Row("image_pull_sidecar", "image pull failure (kube-rbac-proxy sidecar)", "FAILURE", image_pull_auth_sidecar),
    Row("taint", "untolerated taint", "FAILURE", untolerated_taint),
    Row("cold_gpu_node", "cold GPU node: image pull outlasts pods-ready timeout, evicted, readmitted warm", "SUCCESS",
        cold_gpu_node, early=True, pods=2),
    Row("replica_failure", "ReplicaFailure (pod creates refused: quota)", "FAILURE", replica_failure),
    Row("head_crash", "head crash mid-job", "FAILURE", head_crash),
    Row("api_503", "API 503 bursts on create, poll, delete", "SUCCESS", api_burst("503")),
    Row("api_429", "API 429 bursts on create, poll, delete", "SUCCESS", api_burst("429")),
    Row("api_resets", "API connection resets on create, poll, delete", "SUCCESS", api_burst("reset")),
    Row("api_latency", "API latency 1.5 s on every cluster request", "SUCCESS", api_latency),
    Row("auth_401", "401 (unknown token)", "FAILURE", auth_failure(401), quota=False),
    Row("auth_403", "403 (no role in the project)", "FAILURE", auth_failure(403), quota=False),
    Row("kill9_no_exit_handler", "kill -9 of follow, no exit handler (sweeper)", "FAILURE", kill9_follow_no_exit_handler),
    Row("rj_job_fails", "rayjob: job exits non-zero", "FAILURE", rj_job_fails, pods=2),
    Row("rj_deadline", "rayjob: job passes activeDeadlineSeconds", "FAILURE", rj_deadline, pods=2),
    Row("rj_cancel_job_running", "rayjob: cancel while the job runs", "FAILURE", rj_cancel_job_running, pods=2),
    Row("rj_kill9_swept_mid_job", "rayjob: kill -9 of the run, lease expired, swept mid-job (KubeRay ends it)",
        "FAILURE", rj_kill9_swept_mid_job, pods=2),
    Row("rj_image_pull", "rayjob: image pull failure (Ray image)", "FAILURE", rj_image_pull, pods=2),
    Row("rj_head_crash", "rayjob: head crash mid-job", "FAILURE", rj_head_crash, pods=2),
    # in queues of their own (quota=False: none of the main ClusterQueue's slots)
    Row("preempted_resumed", "preempted after a checkpoint: resumed from it", "SUCCESS", preempted_resumed, quota=False,
        full=COVERED_RESUMED),
    Row("preempted_before_checkpoint", "preempted before the first checkpoint: starts over", "SUCCESS",
        preempted_before_checkpoint, quota=False),
    Row("preempted_past_budget", "preempted past max_preemptions (0)", "FAILURE", preempted_past_budget, quota=False,
        full=COVERED_BUDGET),
    Row("preempted_while_starting", "preempted while its pods start", "SUCCESS", preempted_while_starting, quota=False),
    Row("rj_preempted_resumed", "rayjob: preempted after a checkpoint: resumed from it", "SUCCESS",
        rj_preempted_resumed, quota=False, full=COVERED_RESUMED),
]


@pytest.fixture(scope="module")
def matrix(box, request, tmp_path_factory):
    """Starts every selected row at once (concurrently, bounded) on first use."""
    from kfp_ray_sandbox.client import SandboxClient

    selected = {item.callspec.params["row"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec") and "row" in item.callspec.params}
    selected -= {r.id for r in ROWS if r.full and not FULL}  # collected, skipped: not run
    client = SandboxClient(box.info)
    client.patch_faults({"platform": PLATFORM})
    m = Matrix(box, [r for r in ROWS if r.id in selected], tmp_path_factory.mktemp("matrix"),
               cpu_slots=int(os.environ.get("KFP_RAY_MATRIX_CPU_SLOTS", "2")),  # 2: other xdist workers share the cores
               quota_slots=int(os.environ.get("KFP_RAY_MATRIX_QUOTA_SLOTS", "5")))
    m.start()
    try:
        yield m
    finally:
        m.stop()
        if not box.stopped:
            client.clear_faults()


@pytest.mark.parametrize("row", [pytest.param(r.id, marks=full_only(r.full)) if r.full else r.id for r in ROWS])
def test_fault_matrix(row, matrix, recorder):
    res = matrix.result(row)
    spec = res.row
    recorder.record(spec.fault, res.outcome, res.detect_s, res.release_s, res.leaks, res.seconds,
                    expected=spec.expect, notes="; ".join(res.notes))
    if res.error is not None:
        raise AssertionError(f"{spec.fault}: {type(res.error).__name__}: {res.error}\n--- the run's log ---\n"
                             f"{res.log[-4000:]}") from res.error
    assert res.status == spec.expect, f"{spec.fault}: expected {spec.expect}, got {res.outcome}\n{res.log[-4000:]}"
    assert res.leaks == {"rayclusters": 0, "rayjobs": 0, "quota": 0, "processes": 0}, f"{spec.fault}: left {res.leaks}"


def test_matrix_leaves_the_queue_empty(matrix, box):
    """After every row: no RayCluster of the matrix, nothing counted in the ClusterQueue."""
    from kfp_ray_sandbox.client import SandboxClient

    for r in matrix.rows:
        matrix.result(r.id)
    summary = SandboxClient(box.info).summary()
    assert [rc["name"] for rc in summary["rayclusters"] if rc["name"].startswith("mx-")] == []
    assert matrix.monitor.rayjobs("mx-") == []
    assert set(summary["queue_usage"].values()) <= {"0"}, summary["queue_usage"]
    assert matrix.monitor.processes("mx-") == []
