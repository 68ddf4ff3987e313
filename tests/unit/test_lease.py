"""Leases (runtime/kfp_ray/lease.py): parsing, expiry, renewal, and which clusters a sweep
deletes, against a bare API server as RHOAI's pipeline-runner (no controllers, no Ray)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from fractions import Fraction

import pytest
from kubernetes import client

from kfp_ray import lease, rayclusters, wait
from kfp_ray.errors import InputError, InputErrors
from kfp_ray.validate import Checker
from tests.helpers import raycluster

NS = "sandbox"
NOW = datetime(2026, 11, 23, 5, 0, 0, tzinfo=UTC)


# --- time and parsing -------------------------------------------------------------------------
def test_lease_times_are_rfc3339_utc_and_round_up():
    assert lease.format_time(NOW) == "2026-11-23T05:00:00Z"
    assert lease.expires_in(600, NOW) == "2026-11-23T05:10:00Z"
    assert lease.expires_in(0.2, NOW) == "2026-11-23T05:00:01Z"  # never shorter than asked
    assert lease.parse("2026-11-23T05:00:00Z") == NOW
    assert lease.parse("2026-11-23T07:00:00+02:00") == NOW
    assert lease.parse("2026-11-23t05:00:00.250z") == NOW + timedelta(milliseconds=250)


@pytest.mark.parametrize("bad", ["", "tomorrow", "2026-11-23", "2026-11-23T05:00:00", "2026-13-23T05:00:00Z", "1795410000"])
def test_what_is_not_an_rfc3339_time_with_a_zone_does_not_parse(bad):
    with pytest.raises(ValueError):
        lease.parse(bad)


def annotated(value):
    meta = {"name": "c", "namespace": NS, "annotations": {} if value is None else {lease.ANNOTATION: value}}
    return {"metadata": meta}


@pytest.mark.parametrize("value, state, left", [
    ("2026-11-23T05:03:00Z", "live", 180.0),
    ("2026-11-23T04:58:00Z", "expired", -120.0),
    ("2026-11-23T05:00:00Z", "expired", 0.0),  # the lease covers up to, not including, its time
    (None, "no lease", None),
    ("soon", "bad lease", None),
])
def test_lease_states(value, state, left):
    got = lease.lease_of(annotated(value), NOW)
    assert (got.state, got.seconds_left) == (state, left)
    assert got.expired == (state == "expired")


def test_lease_parameters_are_checked_with_the_field_and_the_fix():
    c = Checker()
    lease.check(c, 600, 60)
    c.done()
    c = Checker()
    lease.check(c, 90, 60)
    with pytest.raises(InputError, match=r"lease_seconds: 90 is shorter than two renewal periods.*Fix: give lease_seconds of at least 120"):
        c.done()
    c = Checker()
    lease.check(c, 0, -1)
    with pytest.raises(InputErrors, match="renew_every_seconds: -1 must be a number of seconds above zero") as err:
        c.done()
    assert "lease_seconds: 0 must be" in str(err.value)


def test_combined_heartbeats_each_run_whatever_the_other_does(capsys):
    calls = []

    def broken():
        calls.append("broken")
        raise RuntimeError("lease patch refused")

    both = wait.combine(broken, None, lambda: calls.append("other"))
    both()
    assert calls == ["broken", "other"] and "heartbeat failed (RuntimeError: lease patch refused)" in capsys.readouterr().out
    assert wait.combine(None, None) is None and wait.combine(None, broken) is broken


# --- what a cluster holds ---------------------------------------------------------------------
def test_held_resources_come_from_the_pod_templates():
    body = raycluster("c", workers=3, cpu="500m", memory="2Gi", gpu=1)
    body["spec"]["headGroupSpec"]["template"]["spec"]["initContainers"] = [
        {"name": "create-cert", "resources": {"requests": {"cpu": "2", "memory": "64Mi"}}}]
    got = lease.held(body)
    # head: max(0.5 cpu of its container, 2 of its init container) = 2; workers 3 x 0.5
    assert got.pods == 4
    assert got.amounts == {"cpu": Fraction(7, 2), "memory": 8 * 2**30, "nvidia.com/gpu": 4}
    assert got.describe() == "cpu 3.5, memory 8Gi, gpu 4, 4 pods"
    assert lease.held(raycluster("h", workers=0, cpu="1", memory="1536Mi")).describe() == "cpu 1, memory 1.5Gi, 1 pod"


def test_only_clusters_with_kfp_rays_labels_are_managed():
    assert lease.managed(kfp_ray_cluster("a", "r1", None))
    half = kfp_ray_cluster("b", "r1", None)
    del half["metadata"]["labels"][rayclusters.RUN_LABEL]
    assert not lease.managed(half)
    assert not lease.managed(raycluster("c"))


# --- against the API, as pipeline-runner ---------------------------------------------------------
@pytest.fixture
def co(admin):
    api = client.CustomObjectsApi(admin)
    yield api
    for rc in api.list_namespaced_custom_object("ray.io", "v1", NS, "rayclusters")["items"]:
        if rc["metadata"].get("finalizers"):
            api.patch_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", rc["metadata"]["name"],
                                               {"metadata": {"finalizers": None}})
        try:
            api.delete_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", rc["metadata"]["name"])
        except client.ApiException as exc:
            assert exc.status == 404


def kfp_ray_cluster(name, run, expires, **kw):
    body = raycluster(name, workers=1, cpu="1", memory="2Gi", **kw)
    meta = body["metadata"]
    meta["labels"].update({lease.MANAGED_BY[0]: lease.MANAGED_BY[1], rayclusters.RUN_LABEL: run})
    meta["annotations"] = {lease.RUN_ID_ANNOTATION: f"{run}-full-id"}
    if expires is not None:
        meta["annotations"][lease.ANNOTATION] = expires
    return body


def when(seconds: float) -> str:
    return lease.format_time(datetime.now(UTC) + timedelta(seconds=seconds))


def names(co) -> set[str]:
    return {rc["metadata"]["name"] for rc in co.list_namespaced_custom_object("ray.io", "v1", NS, "rayclusters")["items"]}


def annotation(co, name) -> str:
    return co.get_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", name)["metadata"]["annotations"][lease.ANNOTATION]


def test_sweep_deletes_only_kfp_ray_clusters_whose_lease_expired(co, as_runner):
    clusters = {
        "expired": kfp_ray_cluster("expired", "r1", when(-90)),
        "live": kfp_ray_cluster("live", "r2", when(300)),
        "no-lease": kfp_ray_cluster("no-lease", "r3", None),
        "bad-lease": kfp_ray_cluster("bad-lease", "r4", "next tuesday"),
        "foreign": raycluster("foreign"),  # not kfp-ray's: never touched, whatever it says
        "half": kfp_ray_cluster("half", "r5", when(-90)),
        "deleting": kfp_ray_cluster("deleting", "r6", when(-90)),
    }
    clusters["foreign"]["metadata"]["annotations"] = {lease.ANNOTATION: when(-90)}
    del clusters["half"]["metadata"]["labels"][rayclusters.RUN_LABEL]
    clusters["deleting"]["metadata"]["finalizers"] = ["test.kfp-ray.io/hold"]
    for body in clusters.values():
        co.create_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", body)
    co.delete_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", "deleting")

    dry = {e.name: e for e in lease.sweep(NS)}
    assert set(dry) == {"expired", "live", "no-lease", "bad-lease", "deleting"}  # only kfp-ray's, listed
    assert {n: e.action for n, e in dry.items()} == {
        "expired": "would delete", "live": "kept", "no-lease": "kept", "bad-lease": "kept", "deleting": "being deleted"}
    assert names(co) == set(clusters)  # a dry run deletes nothing
    e = dry["expired"]
    assert (e.run_id, e.lease.state, e.admitted) == ("r1-full-id", "expired", False)
    assert 85 <= -e.lease.seconds_left < 120
    text = lease.render(list(dry.values()), False, "in namespace sandbox")
    assert re.search(r"expired 1m\d\ds ago", text) and "r1-full-id" in text and "cpu 2, memory 4Gi, 2 pods (queued: no quota held)" in text
    assert "unreadable ('next tuesday')" in text and "none" in text
    assert text.splitlines()[-1] == ("5 kfp-ray RayClusters in namespace sandbox, 1 with an expired lease. "
                                     "Dry run: nothing deleted")

    done = {e.name: e.action for e in lease.sweep(NS, delete=True, timeout=10)}
    assert done == {"expired": "deleted", "live": "kept", "no-lease": "kept", "bad-lease": "kept", "deleting": "being deleted"}
    assert names(co) == set(clusters) - {"expired"}


def test_a_renewal_between_the_sweeps_look_and_its_delete_wins(co, as_runner):
    """The sweeper deletes the version it judged (preconditions uid + resourceVersion): a
    renewal in between makes the delete fail with 409, and the cluster is judged again."""
    co.create_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", kfp_ray_cluster("racy", "r7", when(-5)))
    seen = lease.list_clusters(NS)[0]
    entry = lease.judge(seen)
    assert entry.lease.expired
    assert lease.Renewer("racy", NS, 60, 10).renew()  # the follow task renews just now
    assert lease._delete_expired(seen, entry) is None
    assert entry.action == "renewed meanwhile" and entry.lease.state == "live"
    assert names(co) == {"racy"}


def test_renewer_renews_when_due_and_survives_failures(api, co, as_runner, capsys):
    co.create_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", kfp_ray_cluster("renewed", "r8", when(30)))
    t = [0.0]
    now = [NOW]
    r = lease.Renewer("renewed", NS, lease_seconds=120, every=10, clock=lambda: t[0], now=lambda: now[0])
    before = co.get_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", "renewed")["metadata"]["generation"]
    r()
    assert annotation(co, "renewed") == "2026-11-23T05:02:00Z"  # the first call renews
    # A metadata-only patch leaves the generation alone (readiness counts evictions by it).
    assert co.get_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", "renewed")["metadata"]["generation"] == before
    now[0] += timedelta(seconds=5)
    t[0] = 5.0
    r()
    assert annotation(co, "renewed") == "2026-11-23T05:02:00Z"  # not due yet: no request
    api.faults.set({"api": {"errors": {"code": 503, "count": 1, "path": "rayclusters/renewed"}}})
    t[0] = 10.0
    r()  # fails: logged, no exception
    assert annotation(co, "renewed") == "2026-11-23T05:02:00Z" and r.failures == 1
    t[0] = 10.0 + lease.RETRY_S
    now[0] += timedelta(seconds=10)
    r()  # tried again soon, not a whole period later
    assert annotation(co, "renewed") == "2026-11-23T05:02:15Z" and r.failures == 0
    out = capsys.readouterr().out
    assert "could not renew the lease of RayCluster renewed (ApiException 503" in out
    assert "runs out at 2026-11-23T05:02:00Z" in out and "renewed after 1 failed attempts" in out
    co.delete_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", "renewed")
    assert not r.renew() and r.gone  # gone: it stops, and never recreates it
    assert "renewed" not in names(co)


def test_every_deletion_by_kfp_ray_expires_the_lease_first(api, co, as_runner):
    """Should the delete fail after it, or the task die in between, the next sweep collects
    the cluster rather than waiting for the lease to run out: the lease is set to now, by a
    merge patch (pipeline-runner may patch, not update), before the DELETE."""
    body = kfp_ray_cluster("torn", "r9", when(600))
    body["metadata"]["finalizers"] = ["test.kfp-ray.io/hold"]
    co.create_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", body)
    with pytest.raises(Exception, match="still exists 1s after its deletion was requested"):
        rayclusters.delete("torn", NS, timeout=1)
    assert lease.parse(annotation(co, "torn")) <= datetime.now(UTC)
    lines = [json.loads(x) for x in open(api.audit._path) if "rayclusters/torn" in x]
    verbs = [x["verb"] for x in lines if x["verb"] in ("patch", "delete")]
    assert verbs[:2] == ["patch", "delete"]
    # The same, from the lease's side: expire() alone makes a live cluster collectable.
    co.create_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", kfp_ray_cluster("dropped", "r10", when(600)))
    assert lease.expire("dropped", NS)
    assert {e.name: e.action for e in lease.sweep(NS, delete=True, timeout=10)}["dropped"] == "deleted"


def test_listing_all_namespaces_as_pipeline_runner_fails_naming_the_fix(co, as_runner):
    with pytest.raises(Exception, match=r"may not list RayClusters \(ray.io\) in all namespaces. Fix: sweep one namespace"):
        lease.sweep(None)


def kfp_ray_rayjob(name, run, expires):
    """A RayJob as run_ray_job creates it: the cluster's labels and lease on the RayJob."""
    rc = kfp_ray_cluster(name, run, expires)
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": rc["metadata"],
            "spec": {"entrypoint": "python train.py", "shutdownAfterJobFinishes": True, "rayClusterSpec": rc["spec"]}}


def test_sweep_judges_a_rayjob_by_its_lease_and_its_cluster_through_it(co, as_runner):
    """KubeRay copies the RayJob's labels and lease onto the cluster it creates, but only the
    RayJob's lease is renewed: the sweeper lists the RayJob (deleting it deletes the cluster)
    and never the cluster on its own."""
    for name, expires in (("old-job", when(-90)), ("busy-job", when(300))):
        co.create_namespaced_custom_object("ray.io", "v1", NS, "rayjobs", kfp_ray_rayjob(name, "r8", expires))
    owner = co.get_namespaced_custom_object("ray.io", "v1", NS, "rayjobs", "busy-job")
    copy = kfp_ray_cluster("busy-job-x7k2p", "r8", when(-90))  # its copy of the lease ran out long ago
    copy["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "busy-job",
                                            "uid": owner["metadata"]["uid"], "controller": True}]
    co.create_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", copy)
    try:
        dry = {e.name: e for e in lease.sweep(NS)}
        assert {n: e.action for n, e in dry.items()} == {"rayjob/old-job": "would delete", "rayjob/busy-job": "kept"}
        assert dry["rayjob/old-job"].held.describe() == "cpu 2, memory 4Gi, 2 pods"  # its rayClusterSpec's
        assert lease.summary(list(dry.values()), False, "here").startswith("2 kfp-ray RayClusters and RayJobs here, 1 with")
        done = {e.name: e.action for e in lease.sweep(NS, delete=True, timeout=10)}
        assert done == {"rayjob/old-job": "deleted", "rayjob/busy-job": "kept"}
        left = {rj["metadata"]["name"] for rj in co.list_namespaced_custom_object("ray.io", "v1", NS, "rayjobs")["items"]}
        assert left == {"busy-job"} and "busy-job-x7k2p" in names(co)
    finally:
        co.delete_namespaced_custom_object("ray.io", "v1", NS, "rayjobs", "busy-job")


def test_an_expired_rayjob_whose_job_runs_is_left_to_kuberay(co, admin, as_runner):
    """Issue 25 item 2: a RayJob admitted and not over (its job starting or running) is KubeRay's
    to end (the job's end, or activeDeadlineSeconds), whatever its lease says: its task was
    killed or its run deleted, and the job runs on. The sweeper frees only the expired RayJobs
    that hold no quota: their job over (Complete, Failed), or still queued (suspended)."""
    states = {"running-job": (False, "Running"), "starting-job": (False, "Initializing"),
              "done-job": (False, "Complete"), "failed-job": (False, "Failed"), "queued-job": (True, "Suspended")}
    for name, (suspend, deployment) in states.items():
        body = kfp_ray_rayjob(name, "r9", when(-90))
        body["spec"]["suspend"] = suspend
        co.create_namespaced_custom_object("ray.io", "v1", NS, "rayjobs", body)
        co.patch_namespaced_custom_object("ray.io", "v1", NS, "rayjobs", name, {"spec": {"suspend": suspend}})  # Kueue's
        co.patch_namespaced_custom_object_status("ray.io", "v1", NS, "rayjobs", name,
                                                 {"status": {"jobDeploymentStatus": deployment}})
    assert {n: lease.holds_quota(rj) for n, rj in ((rj["metadata"]["name"], {**rj, "kind": "RayJob"}) for rj in
            co.list_namespaced_custom_object("ray.io", "v1", NS, "rayjobs")["items"])} == {
        "running-job": True, "starting-job": True, "done-job": False, "failed-job": False, "queued-job": False}
    try:
        dry = {e.name: e for e in lease.sweep(NS)}
        assert {n: e.action for n, e in dry.items()} == {
            "rayjob/running-job": "left to KubeRay", "rayjob/starting-job": "left to KubeRay",
            "rayjob/done-job": "would delete", "rayjob/failed-job": "would delete", "rayjob/queued-job": "would delete"}
        assert "2 RayJobs with an expired lease whose job runs, left to KubeRay" in lease.summary(list(dry.values()), False, "here")
        done = {e.name: e.action for e in lease.sweep(NS, delete=True, timeout=10)}
        assert done == {"rayjob/running-job": "left to KubeRay", "rayjob/starting-job": "left to KubeRay",
                        "rayjob/done-job": "deleted", "rayjob/failed-job": "deleted", "rayjob/queued-job": "deleted"}
        left = {rj["metadata"]["name"] for rj in co.list_namespaced_custom_object("ray.io", "v1", NS, "rayjobs")["items"]}
        assert left == {"running-job", "starting-job"}
        # A job that ends meanwhile (KubeRay deleted its cluster): the next sweep frees the RayJob.
        co.patch_namespaced_custom_object_status("ray.io", "v1", NS, "rayjobs", "running-job",
                                                 {"status": {"jobDeploymentStatus": "Complete"}})
        assert {e.name: e.action for e in lease.sweep(NS, delete=True, timeout=10)}["rayjob/running-job"] == "deleted"
    finally:
        for rj in co.list_namespaced_custom_object("ray.io", "v1", NS, "rayjobs")["items"]:
            co.delete_namespaced_custom_object("ray.io", "v1", NS, "rayjobs", rj["metadata"]["name"])


def test_a_rayjob_admitted_between_the_sweeps_look_and_its_delete_is_left_to_kuberay(co, as_runner):
    """The sweeper judged a queued RayJob expired; Kueue admits it before the DELETE (409 on the
    preconditions): judged again, its job may run now, so it is KubeRay's."""
    co.create_namespaced_custom_object("ray.io", "v1", NS, "rayjobs", {**kfp_ray_rayjob("late-job", "r10", when(-5)),
                                                                        "spec": {**kfp_ray_rayjob("x", "r", None)["spec"],
                                                                                 "suspend": True}})
    try:
        seen = lease.list_clusters(NS, rayclusters.RAYJOB)[0]
        entry = lease.judge(seen)
        assert entry.lease.expired and entry.action == "kept"
        co.patch_namespaced_custom_object("ray.io", "v1", NS, "rayjobs", "late-job", {"spec": {"suspend": False}})
        assert lease._delete_expired(seen, entry) is None
        assert entry.action == "left to KubeRay"
        assert co.get_namespaced_custom_object("ray.io", "v1", NS, "rayjobs", "late-job")
    finally:
        co.delete_namespaced_custom_object("ray.io", "v1", NS, "rayjobs", "late-job")


def test_a_hand_off_covers_the_gap_to_the_next_task_and_is_never_shorter_than_the_lease(co, as_runner, capsys):
    """Issue 25 item 5: between two tasks nothing renews, so the task that hands the cluster on
    sets the lease to HANDOFF_S (1 h); a lease longer than that is kept as it is."""
    co.create_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", kfp_ray_cluster("handed", "r11", when(30)))
    assert lease.Renewer("handed", NS, 600, 60, now=lambda: NOW).hand_off()
    assert annotation(co, "handed") == "2026-11-23T06:00:00Z"
    assert "lease of RayCluster handed handed on: until 2026-11-23T06:00:00Z (3600s)" in capsys.readouterr().out
    assert lease.Renewer("handed", NS, 7200, 60, now=lambda: NOW).hand_off()
    assert annotation(co, "handed") == "2026-11-23T07:00:00Z"
