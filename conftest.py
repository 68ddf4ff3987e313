"""Shared fixtures (tests/ and components/*/tests). `box` is one sandbox per test session (real Ray heads are what
costs time); each test leaves it as it found it: no faults, no RayClusters."""

from __future__ import annotations

import contextlib
import os
import time

import pytest

from kfp_ray_sandbox import Sandbox
from kfp_ray_sandbox.client import SandboxClient
from kfp_ray_sandbox.raypip import SHARED_ENV

# The suite's Ray nodes share each runtime_env pip install (sandbox/raypip.py): installing torch on
# every node of every test's cluster would cost minutes each. Set before any sandbox starts, so the
# `kfp-ray run --local` subprocesses inherit it too; a test of the per-node install sets it to "0".
os.environ.setdefault(SHARED_ENV, "1")


@pytest.hookimpl(trylast=True)  # after xdist's own, which registers its controller ("dsession")
def pytest_configure(config):
    """SIGTERM unwinds a test run like Ctrl-C, so the session's sandbox stops in order (its
    watchdog covers SIGKILL). Under xdist each worker has its own sandbox, whose watchdog
    watches the worker: a worker dies with its controller (a SIGKILLed one included), and the
    controller passes a SIGTERM on to its workers, which exit at once (their watchdogs reap;
    an orderly stop would wait on the controller, which waits on them)."""
    import signal
    import threading

    from kfp_ray_sandbox.reaper import children, die_with_parent, raise_interrupt, signal_pid

    if threading.current_thread() is not threading.main_thread():
        return
    if hasattr(config, "workerinput"):
        die_with_parent()
        signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(128 + signum))
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return
    if not config.pluginmanager.hasplugin("dsession"):
        signal.signal(signal.SIGTERM, raise_interrupt)
        return

    def controller_sigterm(signum, frame):
        for pid in children(os.getpid()):
            signal_pid(pid, signal.SIGTERM)
        raise_interrupt(signum, frame)

    signal.signal(signal.SIGTERM, controller_sigterm)


# The order modules start in. Under xdist (`-n 3 --dist loadscope --no-loadscope-reorder`,
# pyproject.toml) each module runs whole on one worker, handed out in this order as workers
# free up: longest first (LPT), so that no long module starts late and runs alone at the end
# (a 2.5-minute tail at a quarter of the CPU before this order). The suite is CPU-bound on
# this 2-core machine, so a worker's seconds are roughly its share of the CPU.
# The fault matrix runs its rows concurrently and spends most of its time waiting (3-minute
# outages), while other workers run the rest. Ray-free modules come right after it, so the
# other workers' first Ray start-ups come after the matrix's first rows have started theirs
# (most failures seen under xdist were start-ups at once in the first minutes).
FIRST = (
    "tests/reliability/test_fault_matrix.py",
    "tests/unit/test_apiserver.py",
    "tests/unit/test_kueue.py",
    "tests/unit/test_runtime.py",
    "tests/unit/test_schema.py",
    "tests/unit/test_openapi.py",
)
# Seconds per module in a whole `make test` (--durations=0, summed per module; 2026-11-27, e444ca8 on a
# slower machine than before, fashion_mnist's 2.25 run and test_entrypoint's merge estimated);
# refresh when a module grows. Kept as measured then: a refresh from 2026-11-28's run (f567bfb) gave
# a slower suite (1,559 s against 1,408 s on the same code): which Ray-heavy modules overlap matters
# more than their sums. Modules not listed (all under 8 s, or new) go last, in collection order,
# where short ones fill the workers' ends.
MEASURED_S = {
    "tests/reliability/test_owner_death.py": 301,
    "tests/pipelines/test_job_contract.py": 274,
    "tests/sandbox/test_pipeline_server.py": 238,
    "components/run_ray_job/tests/test_run.py": 199,
    "tests/pipelines/test_interactive_train.py": 180,  # its 2.25 run: FULL only
    "tests/pipelines/test_run_preempted.py": 160,  # fashion_mnist preempted and resumed (its CLI runs: FULL only)
    "tests/sandbox/test_nodes.py": 145,
    "components/provision_ray_cluster/tests/test_provision.py": 128,
    "tests/pipelines/test_run_local.py": 110,  # its xgboost_tune run: FULL only
    "tests/sandbox/test_rayjob.py": 110,
    "components/provision_ray_cluster/tests/test_platform.py": 98,
    "tests/sandbox/test_codeflare_sdk.py": 96,
    "tests/pipelines/test_run_rayjob.py": 90,
    "components/run_ray_job/tests/test_entrypoint.py": 90,
    "tests/reliability/test_sweeper.py": 89,
    "tests/pipelines/test_cluster_cli.py": 76,
    "tests/sandbox/test_faults.py": 76,
    "components/follow_ray_job/tests/test_follow.py": 75,
    "components/provision_ray_cluster/tests/test_queue_position.py": 58,
    "components/run_ray_job/tests/test_queue_and_log.py": 55,
    "components/submit_ray_job/tests/test_submit.py": 55,
    "components/follow_ray_job/tests/test_preemption.py": 55,
    "tests/contract/test_kubectl_streams.py": 53,
    "tests/reliability/test_benchmark_owners.py": 45,
    "tests/contract/test_kubectl.py": 43,
    "tests/components/test_pipeline.py": 43,
    "tests/sandbox/test_rayjob_order.py": 43,
    "tests/unit/test_slim.py": 42,
    "components/follow_ray_job/tests/test_durable_log.py": 40,
    "components/follow_ray_job/tests/test_redaction.py": 34,
    "tests/pipelines/test_compiled.py": 32,
    "components/follow_ray_job/tests/test_submit_and_follow.py": 30,
    "tests/sandbox/test_kueue_eviction.py": 30,
    "components/provision_ray_cluster/tests/test_pod_failures.py": 28,
    "tests/sandbox/test_kuberay.py": 28,
    "tests/sandbox/test_rbac_rules.py": 25,
    "tests/pipelines/test_compile_options.py": 25,
    "tests/unit/test_retries.py": 24,
    "components/teardown_ray_cluster/tests/test_teardown.py": 24,
    "tests/sandbox/test_ray_client_tls.py": 22,
    "components/follow_ray_job/tests/test_cancel.py": 22,
    "tests/unit/test_rayimage.py": 19,
    "components/provision_ray_cluster/tests/test_cancel.py": 17,
    "tests/sandbox/test_quota.py": 17,
    "tests/sandbox/test_lifecycle.py": 16,
    "tests/sandbox/test_imagehooks.py": 16,
    "tests/sandbox/test_cli.py": 16,
    "components/provision_ray_cluster/tests/test_identity.py": 15,
    "components/follow_ray_job/tests/test_delete.py": 15,
    "components/provision_ray_cluster/tests/test_queue_and_namespace.py": 15,
    "tests/pipelines/test_server_cli.py": 14,
    "tests/pipelines/test_doctor.py": 14,
    "components/stage_dataset/tests/test_stage.py": 14,
    "tests/unit/test_local_env.py": 12,
    "tests/report/test_report_html.py": 11,
    "tests/unit/test_packaging.py": 11,
    "tests/pipelines/test_gc.py": 11,
    "tests/pipelines/test_elyra_catalog.py": 10,
    "tests/pipelines/test_cluster_down.py": 10,
    "components/follow_ray_job/tests/test_outage.py": 10,
    "components/sweep_ray_clusters/tests/test_sweep.py": 10,
    "components/follow_ray_job/tests/test_logtail.py": 8,
    "tests/sandbox/test_rayjob_images.py": 1,  # FULL only
}

# Placed as if this long: the owner-death tests start three sandboxes at once, which at the
# start would add to the matrix's and the CLI runs' Ray start-ups
MID_SUITE = {"tests/reliability/test_owner_death.py": 110}


def pytest_collection_modifyitems(config, items):
    def rank(item):
        module = item.nodeid.split("::", 1)[0]
        if module in FIRST:
            return (0, FIRST.index(module))
        return (1, -min(MEASURED_S.get(module, 0), MID_SUITE.get(module, 1e9)))

    items.sort(key=rank)  # stable: a module's tests, and the unlisted modules, keep their order


def pytest_runtest_logreport(report):
    from tests.reliability import summary

    summary.collect(report)


def pytest_terminal_summary(terminalreporter):
    from tests.reliability import summary

    summary.print_table(terminalreporter)


def pytest_keyboard_interrupt(excinfo):
    """Ctrl-C or SIGTERM: stop the session's sandbox at once, before the fixtures' teardown
    (which would wait on it)."""
    for sb in _RUNNING:
        sb.stop()


_RUNNING: list[Sandbox] = []  # the session's sandboxes, for pytest_keyboard_interrupt


@pytest.fixture(scope="session")
def sandboxes(tmp_path_factory):
    """get(platform) -> the session's sandbox playing that OpenShift AI release (sandbox/platforms.py),
    started on first use and stopped at the session's end (switching `box`'s platform stops none)."""
    from kfp_ray_sandbox.reaper import owned_tempdir

    os.environ["CODEFLARE_TLS_DIR"] = str(tmp_path_factory.mktemp("codeflare-tls"))
    started: dict[str, Sandbox] = {}
    with contextlib.ExitStack() as stack:
        def get(platform: str) -> Sandbox:
            if platform not in started:
                # `sandbox<N>`: the owner-death tests find a pytest owner's sandbox as sandbox0
                sb = Sandbox(tmp_path_factory.mktemp("sandbox"), platform=platform)
                sb.start()
                _RUNNING.append(sb)
                stack.callback(sb.stop)
                stack.callback(_RUNNING.remove, sb)
                stack.enter_context(owned_tempdir(sb.watchdog))  # temp files of this run go with it, even on SIGKILL
                started[platform] = sb
            return started[platform]

        yield get


@pytest.fixture(scope="session")
def box(request, sandboxes):
    """The session's sandbox: the default platform (RHOAI 3.3), or the one a test asks for with
    `@on_platforms(...)` (tests/helpers.py), i.e. parametrize("box", [...], indirect=True)."""
    from kfp_ray_sandbox.platforms import DEFAULT_PLATFORM

    return sandboxes(getattr(request, "param", DEFAULT_PLATFORM))


@pytest.fixture
def sbx(box):
    """A client of the session sandbox; clears faults, and deletes the RayJobs and RayClusters the test left."""
    from kubernetes import client as k8s

    client = SandboxClient(box.info)
    client.clear_faults()
    co = k8s.CustomObjectsApi(client.api_client())

    def names(plural: str = "rayclusters"):
        return {rc["metadata"]["name"] for rc in co.list_namespaced_custom_object("ray.io", "v1", client.namespace, plural)["items"]}

    before, jobs_before = names(), names("rayjobs")
    yield client
    if box.stopped:  # an interrupted run: nothing to tidy
        return
    client.clear_faults()
    for name in names("rayjobs") - jobs_before:  # their clusters go with them
        co.delete_namespaced_custom_object("ray.io", "v1", client.namespace, "rayjobs", name)
    for name in names() - before:
        co.delete_namespaced_custom_object("ray.io", "v1", client.namespace, "rayclusters", name)
    keep = {p["cluster"] for p in client.processes()} & before
    deadline = time.monotonic() + 60
    while [p for p in client.processes() if p["cluster"] not in keep] and time.monotonic() < deadline:
        time.sleep(0.2)


@pytest.fixture
def sdk_auth(box, monkeypatch):
    """Point the CodeFlare SDK at the sandbox as its admin user (a workbench user with edit),
    trusting the sandbox's CA as a workbench trusts its cluster's (RHOAI mounts the trusted CA
    bundle and points REQUESTS_CA_BUNDLE at it): the 3.x dashboard is behind the gateway's TLS."""
    from codeflare_sdk import KubeConfigFileAuthentication
    from codeflare_sdk.common.kubernetes_cluster import auth

    monkeypatch.setenv("REQUESTS_CA_BUNDLE", box.info["ca_file"])
    KubeConfigFileAuthentication(kube_config_path=box.info["kubeconfig"]).load_kube_config()
    yield
    auth.api_client = None
    auth.config_path = None


def _kube_identity(monkeypatch, kubeconfig):
    from kfp_ray import kube

    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    kube.api_client.cache_clear()


@pytest.fixture
def as_pipeline_runner(box, monkeypatch):
    """The runtime library's kube access as RHOAI's pipeline-runner service account."""
    from kfp_ray import kube

    _kube_identity(monkeypatch, box.info["kubeconfig_pipeline_runner"])
    yield
    kube.api_client.cache_clear()


@pytest.fixture
def as_admin(box, monkeypatch):
    """The runtime library's kube access as a user who may read Kueue objects."""
    from kfp_ray import kube

    _kube_identity(monkeypatch, box.info["kubeconfig"])
    yield
    kube.api_client.cache_clear()


@pytest.fixture
def run_local(box, tmp_path):
    """Run a pipeline or component with kfp.local (isolated env) as pipeline-runner;
    returns (result, log text)."""
    import io

    from kfp_ray.pipelines import local

    def run(target, arguments, env=None, output=None, on_start=None):
        buf = output or io.StringIO()
        result = local.run(target, arguments, env={"KUBECONFIG": box.info["kubeconfig_pipeline_runner"], **(env or {})},
                           pipeline_root=str(tmp_path / f"root-{len(list(tmp_path.iterdir()))}"), output=buf,
                           on_start=on_start, watchdog=box.watchdog)
        return result, buf.getvalue()

    return run


@pytest.fixture(scope="module")
def ray_cluster(box):
    """One small real RayCluster for a test module, provisioned by the runtime library
    (as admin); deleted at the end. Yields kfp_ray.cluster.Provisioned."""
    from kubernetes import client as k8s

    from kfp_ray import cluster, tasks
    from tests.helpers import eventually, kube_identity

    with kube_identity(box.info["kubeconfig"]):
        try:
            yield tasks.provision(run_id=f"fixture-{os.getpid()}", cluster_name="shared-ray", namespace="sandbox",
                                  local_queue="local-queue-test", num_workers=0, head_cpu="2", head_memory="2Gi",
                                  startup_timeout=120)
        finally:
            if not box.stopped:  # else an interrupted run: nothing to delete
                cluster.delete("shared-ray", "sandbox")
                # the next module's shared-ray must not meet this one's pods, still terminating
                # with the same labels: KubeRay counts pods by label, so it would look ready at once
                v1 = k8s.CoreV1Api(SandboxClient(box.info).api_client())
                eventually(lambda: not v1.list_namespaced_pod("sandbox", label_selector="ray.io/cluster=shared-ray").items,
                           60, 0.2, what="shared-ray's pods to be gone")
