"""The sweeper case of the fault matrix (issue 9): a run whose follow task is SIGKILLed and
whose exit handler never runs (a deleted KFP run runs none). Two runs, each with a real
head-only RayCluster, provisioned by the real provision code with a short lease, a real Ray
job, and the real follow task code in a process of its own renewing the lease. One follow
is SIGKILLed: the sweeper (the sweep_ray_clusters component's function, run every few
seconds as pipeline-runner) frees its cluster within the lease plus one sweep: deleted,
Ray processes gone, quota released. The other run's follow keeps renewing: its cluster, job
and follow are left alone through every sweep, past the time its lease would have run out."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kubernetes import client as k8s

from kfp_ray import jobs, lease, tasks
from tests.helpers import FakeClock, cpu_in_use, eventually

pytestmark = pytest.mark.ray
ROOT = Path(__file__).resolve().parents[2]
NS = "sandbox"
LEASE_S, RENEW_S = 8.0, 1.0  # short, through the tasks' parameters; 7 s of margin against a slow loop
SWEEP_EVERY_S = 2.0  # the recurring sweep's period, shortened
HANG_S = 300.0  # a bound on a hang past the lease (a sweep that never frees it), not a measurement
JOB = "python -c \"import time; print('SWEEPER-JOB-' + 'RUNNING', flush=True); time.sleep(600)\""
# A task's code as its pod runs it: a process of its own, as pipeline-runner.
TASK = ("import dataclasses, json, sys\nfrom kfp_ray import tasks\n"
        "out = getattr(tasks, sys.argv[1])(**json.loads(sys.argv[2]))\n"
        "print('RESULT', json.dumps(dataclasses.asdict(out)), flush=True)\n")


def start_task(box, tmp_path: Path, task: str, name: str, **args) -> tuple[subprocess.Popen, Path]:
    env = {**os.environ, **box.watchdog.env(), "KUBECONFIG": box.info["kubeconfig_pipeline_runner"], "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "runtime"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    log = tmp_path / f"{name}.{task}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", TASK, task, json.dumps(args)], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    return proc, log


def start_provision(box, tmp_path: Path, name: str) -> tuple[subprocess.Popen, Path]:
    return start_task(box, tmp_path, "provision", name, run_id=f"run-{name}", cluster_name=name, namespace=NS,
                      local_queue="local-queue-test", num_workers=0, head_cpu="1", head_memory="1Gi", admission_timeout=60,
                      startup_timeout=150, lease_seconds=LEASE_S, renew_every_seconds=RENEW_S)


def provisioned(proc: subprocess.Popen, log: Path) -> dict:
    proc.wait(timeout=240)
    text = log.read_text()
    assert proc.returncode == 0, text
    return json.loads(next(line for line in text.splitlines() if line.startswith("RESULT "))[len("RESULT "):])


def start_follow(box, tmp_path: Path, name: str, url: str, job_id: str) -> tuple[subprocess.Popen, Path]:
    return start_task(box, tmp_path, "follow", name, dashboard_url=url, job_id=job_id,
                      log_path=str(tmp_path / f"{name}.job.log"), cluster_name=name, namespace=NS, timeout=600,
                      max_poll_seconds=1.0, lease_seconds=LEASE_S, renew_every_seconds=RENEW_S)


def test_a_killed_follow_with_no_exit_handler_is_swept_and_a_live_run_is_not(box, sbx, as_pipeline_runner, tmp_path, capsys):
    sbx.set_faults({"platform": {"finalizer_delay_s": 0.5, "termination_grace_s": 2}})
    co = k8s.CustomObjectsApi(sbx.api_client())
    dead, alive = "sweep-dead", "sweep-alive"

    procs = []
    try:
        starting = {name: start_provision(box, tmp_path, name) for name in (dead, alive)}  # both runs at once
        procs += [proc for proc, _ in starting.values()]
        clusters = {name: provisioned(*started) for name, started in starting.items()}
        both = cpu_in_use(co)
        follows = {}
        for name, p in clusters.items():
            job_id = tasks.submit(p["dashboard_url"], JOB, run_id=f"run-{name}", task="submit-ray-job")
            follows[name] = (*start_follow(box, tmp_path, name, p["dashboard_url"], job_id), job_id)
            procs.append(follows[name][0])
        for name, (proc, log, _) in follows.items():
            eventually(lambda name=name, log=log, proc=proc: proc.poll() is not None
                       or f"lease of RayCluster {name} renewed" in log.read_text(), 60, 0.2,
                       what=f"{name}'s follow to renew its lease")
            assert proc.poll() is None, log.read_text()
            eventually(lambda log=log: "SWEEPER-JOB-RUNNING" in log.read_text(), 60, 0.2, what=f"{name}'s job to run")

        # kill -9 of the follow task: no cleanup code, and no exit handler will run.
        dead_proc, dead_log, _ = follows[dead]
        dead_proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        killed_at = datetime.now(UTC)
        dead_proc.wait(timeout=10)

        # The recurring sweep, every SWEEP_EVERY_S, until the dead run's cluster is freed and the
        # live run has been swept past the time its lease would have run out without renewals.
        sweeps: list[tuple[datetime, str]] = []  # (when it began, what it did to the dead run's cluster)
        expiry = requested = freed = None
        while freed is None or time.monotonic() - killed < LEASE_S + 2 * SWEEP_EVERY_S:
            assert time.monotonic() - killed < LEASE_S + HANG_S, "the sweep never freed it"
            began, began_at = time.monotonic(), datetime.now(UTC)
            entries = {e.name: e for e in tasks.sweep(namespace=NS, delete=True, timeout=60)}
            assert entries[alive].action == "kept" and entries[alive].lease.state == "live", entries[alive]
            sweeps.append((began_at, entries[dead].action if dead in entries else "gone"))
            if dead in entries and entries[dead].action == "deleted":
                requested, freed = began - killed, time.monotonic() - killed
                expiry = lease.parse(entries[dead].lease.value)  # the lease as its last renewal left it
                assert entries[dead].admitted and entries[dead].held.describe().endswith("1 pod")
            time.sleep(max(0.0, SWEEP_EVERY_S - (time.monotonic() - began)))

        out = capsys.readouterr().out
        print(f"\nsweeper: SIGKILL -> the sweep that deleted it began {requested:.1f}s later, gone {freed:.1f}s after "
              f"the SIGKILL (lease {LEASE_S:g}s, a sweep every {SWEEP_EVERY_S:g}s, {len(sweeps)} sweeps)")
        # Its last renewal, made before the kill, ran at most one lease (rounded up to the second) past it ...
        assert (expiry - killed_at).total_seconds() <= LEASE_S + 1, (expiry, killed_at)
        # ... and the first sweep to begin after the lease ran out deleted it (or one that straddled it).
        first_after = next((i for i, (at, _) in enumerate(sweeps) if at >= expiry), len(sweeps))
        deleting = next(i for i, (_, action) in enumerate(sweeps) if action == "deleted")
        assert deleting <= first_after and all(action == "kept" for _, action in sweeps[:deleting]), (sweeps, expiry)
        # How long it took (`freed`, printed above) is the machine's: the order of the sweeps is what is asserted.
        assert f"lease of RayCluster {NS}/{dead} (run run-{dead}) expired" in out
        # Freed: the object, its Ray processes, its quota. The live run: untouched, still renewing.
        names = {rc["metadata"]["name"] for rc in co.list_namespaced_custom_object("ray.io", "v1", NS, "rayclusters")["items"]}
        assert dead not in names and alive in names
        eventually(lambda: not [p for p in sbx.processes() if p["cluster"] == dead], 30, 0.2, what="the dead run's Ray to stop")
        eventually(lambda: abs(cpu_in_use(co) - both / 2) < 1e-6, 30, 0.2, what="the dead run's quota to be released")
        alive_proc, alive_log, alive_job = follows[alive]
        assert alive_proc.poll() is None, alive_log.read_text()
        assert jobs.RayJobsClient(clusters[alive]["dashboard_url"]).info(alive_job)["status"] == "RUNNING"
        assert "could not renew" not in alive_log.read_text()
    finally:
        for proc in procs:  # the live run is cancelled: its follow stops the job and deletes the cluster
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)



def test_a_cluster_handed_between_its_tasks_outlives_the_lease_and_is_spared(box, sbx, as_pipeline_runner, tmp_path,
                                                                             monkeypatch):
    """Issue 25 item 5. Between provision and submit, and between submit and follow, no task
    runs: the next task's pod may wait for namespace quota, pull its image or pip-install. Here
    each of those waits lasts five leases (a fake wall clock, which leases are written and
    judged by): the cluster is handed on at the end of provision and of submit (lease.HANDOFF_S),
    so every sweep in the gaps keeps it, and follow then follows the job on it to its end."""
    clock = FakeClock(time.time())
    monkeypatch.setattr(lease, "utcnow", lambda: datetime.fromtimestamp(clock(), UTC))
    name, run = "handoff", "run-handoff"

    def judged() -> lease.Swept:
        # a dry run: the judgement every sweep makes, without deleting other tests' clusters of this
        # sandbox (their leases are hours behind the fake clock)
        return {e.name: e for e in lease.sweep(NS)}[name]

    p = tasks.provision(run_id=run, cluster_name=name, namespace=NS, local_queue="local-queue-test", num_workers=0,
                        head_cpu="1", head_memory="1Gi", admission_timeout=60, startup_timeout=150)
    gap = 5 * lease.DEFAULT_LEASE_S  # 50 min: longer than a lease, shorter than a hand-off
    clock.advance(gap)  # submit's pod waits
    assert (judged().action, judged().lease.state) == ("kept", "live"), judged()
    job_id = tasks.submit(p.dashboard_url, "python -c \"print('handed-over-ok')\"", run_id=run, cluster_name=name,
                          namespace=NS)
    clock.advance(gap)  # follow's pod waits: 100 min after provision's hand-off, past it
    assert (judged().action, judged().lease.state) == ("kept", "live"), judged()
    result = tasks.follow(p.dashboard_url, job_id, log_path=str(tmp_path / "job.log"), cluster_name=name, namespace=NS,
                          timeout=120, max_poll_seconds=1.0)
    assert result.status == "SUCCEEDED" and "handed-over-ok" in (tmp_path / "job.log").read_text()
    assert name not in {e.name for e in lease.sweep(NS)}  # follow deleted it once the job was over
