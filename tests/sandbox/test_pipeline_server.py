"""Runs through the sandbox's Data Science Pipelines server with the real kfp.Client: each task
a pod of the sandbox (its launcher, its service account, its kfp-kubernetes secrets), outputs
and artifacts under the pipeline root in S3, the exit handler, and terminate and delete
mid-job with the RayCluster released and the quota back to 0."""

# no `from __future__ import annotations`: kfp reads the components' annotations as types

import json

import pytest
from kubernetes import client as k8s

from kfp_ray.pipelines.run_tasks import run_reader
from kfp_ray_sandbox.client import SandboxClient

from .. import helpers
from ..helpers import eventually

NS = "sandbox"
DONE = ("SUCCEEDED", "FAILED", "SKIPPED", "CANCELED")
SLEEP_JOB = "python -c \"import time; print('job started', flush=True); time.sleep(600)\""


def small_pipeline():
    """Three tasks and an exit task: a parameter and a Dataset passed on, the data connection
    as kfp-kubernetes secret env, and a task that fails when asked."""
    from kfp import dsl, kubernetes

    @dsl.component(base_image="registry.access.redhat.com/ubi9/python-311")
    def make(n: int, out: dsl.Output[dsl.Dataset]) -> str:
        import os

        with open(out.path, "w") as f:
            f.write("x" * n)
        out.metadata["rows"] = n
        print("bucket from the data connection:", os.environ["AWS_S3_BUCKET"])
        return "word"

    @dsl.component(base_image="registry.access.redhat.com/ubi9/python-311")
    def use(data: dsl.Input[dsl.Dataset], word: str, fail: bool) -> int:
        text = open(data.path).read()
        print("read", len(text), word, data.metadata.get("rows"))
        if fail:
            raise SystemExit("failing as asked")
        return len(text)

    @dsl.component(base_image="registry.access.redhat.com/ubi9/python-311")
    def cleanup(run: str):
        print("exit handler for", run)

    @dsl.pipeline(name="small")
    def small(n: int = 3, fail: bool = False):
        c = cleanup(run=dsl.PIPELINE_JOB_ID_PLACEHOLDER)
        with dsl.ExitHandler(c):
            m = make(n=n)
            kubernetes.use_secret_as_env(m, secret_name="aws-connection-minio",
                                         secret_key_to_env={"AWS_S3_BUCKET": "AWS_S3_BUCKET"})
            use(data=m.outputs["out"], word=m.outputs["Output"], fail=fail)

    return small


def echo_pipeline():
    """A string `size` characters long made by one task and passed to the next: its size is
    the run's to choose, and it reaches only the second task's executor input."""
    from kfp import dsl

    @dsl.component(base_image="registry.access.redhat.com/ubi9/python-311")
    def make_text(size: int) -> str:
        return "w" * size

    @dsl.component(base_image="registry.access.redhat.com/ubi9/python-311")
    def echo(text: str) -> int:
        print("got", len(text))
        return len(text)

    @dsl.pipeline(name="echo")
    def echoes(size: int = 1, text: str = ""):
        made = make_text(size=size).set_caching_options(False)
        echo(text=made.output).set_caching_options(False)

    return echoes


def loop_pipeline():
    """Two dsl.ParallelFor loops: over literal dicts one at a time (an item's fields), and over
    a list parameter whose squares are dsl.Collected into one task after the loop."""
    from kfp import dsl

    @dsl.component(base_image="registry.access.redhat.com/ubi9/python-311")
    def show(a: str, b: str):
        print("item", a, b)

    @dsl.component(base_image="registry.access.redhat.com/ubi9/python-311")
    def square(x: int) -> int:
        return int(x) * int(x)

    @dsl.component(base_image="registry.access.redhat.com/ubi9/python-311")
    def total(xs: list) -> int:
        print("total", int(sum(xs)), "of", len(xs))  # the collected numbers arrive as JSON numbers (floats)
        return int(sum(xs))

    @dsl.pipeline(name="loops")
    def loops(numbers: list = [1, 2, 3]):  # noqa: B006 - a KFP pipeline default, never mutated
        with dsl.ParallelFor([{"a": "x", "b": "1"}, {"a": "y", "b": "2"}], parallelism=1) as item:
            show(a=item.a, b=item.b).set_caching_options(False)
        with dsl.ParallelFor(numbers) as n:
            sq = square(x=n).set_caching_options(False)
        total(xs=dsl.Collected(sq.output)).set_caching_options(False)

    return loops


def tick_pipeline():
    """One task: what a recurring run fires, cheaply."""
    from kfp import dsl

    @dsl.component(base_image="registry.access.redhat.com/ubi9/python-311")
    def tick(n: int) -> int:
        return n

    @dsl.pipeline(name="tick")
    def ticks(n: int = 1):
        tick(n=n)

    return ticks


@pytest.fixture(scope="module")
def kfp_client(box):
    import kfp

    token = SandboxClient(box.info).token()
    return kfp.Client(host=box.info["pipelines_api"], existing_token=token, ssl_ca_cert=box.info["ca_file"])


def compile_package(tmp_path_factory, pipeline) -> str:
    from kfp import compiler

    path = tmp_path_factory.mktemp("pkg") / "pipeline.yaml"
    compiler.Compiler().compile(pipeline, str(path))
    return str(path)


@pytest.fixture(scope="module")
def small_package(tmp_path_factory):
    return compile_package(tmp_path_factory, small_pipeline())


@pytest.fixture(scope="module")
def tick_package(tmp_path_factory):
    return compile_package(tmp_path_factory, tick_pipeline())


def wait_run(kfp_client, run_id, until=DONE, timeout=300):
    """The whole run (kfp.Client.get_run) once its state is in `until`; polled as the CLI polls,
    through run_tasks.run_reader (get_run builds the whole V2beta1Run on every call)."""
    read = run_reader(kfp_client)
    eventually(lambda: read(run_id).state in until, timeout, 0.5, what=f"run {run_id} to reach one of {until}")
    return kfp_client.get_run(run_id)


def tasks(run) -> dict[str, str]:
    """Each pipeline task's state, as the CLI reads KFP 2.14's node-shaped task details."""
    from kfp_ray.pipelines import run_tasks

    return run_tasks.states(run)


def pod_of(box, run_id, task) -> str:
    """The task's last executor pod, found as the CLI finds it (label and Argo node name)."""
    from kfp_ray.pipelines import run_tasks

    return run_tasks.executor_pods(k8s.CoreV1Api(SandboxClient(box.info).api_client()), NS, run_id)[task][-1]


def pod_log(box, run_id, task) -> str:
    return k8s.CoreV1Api(SandboxClient(box.info).api_client()).read_namespaced_pod_log(pod_of(box, run_id, task), NS)


def why(box, run_id) -> str:
    from kfp_ray.pipelines import run_tasks

    return run_tasks.workflow_failure(k8s.CustomObjectsApi(SandboxClient(box.info).api_client()), NS, run_id)


def test_a_run_passes_parameters_and_artifacts_between_task_pods(box, kfp_client, small_package):
    run = kfp_client.create_run_from_pipeline_package(small_package, arguments={"n": 5}, run_name="small-ok")
    done = wait_run(kfp_client, run.run_id)
    assert done.state == "SUCCEEDED", why(box, run.run_id)
    assert tasks(done) == {"exit-handler-1": "SUCCEEDED", "make": "SUCCEEDED", "use": "SUCCEEDED", "cleanup": "SUCCEEDED"}
    assert "read 5 word 5" in pod_log(box, run.run_id, "use")  # the parameter, the artifact and its metadata
    assert "bucket from the data connection: kfp-ray" in pod_log(box, run.run_id, "make")
    assert f"exit handler for {run.run_id}" in pod_log(box, run.run_id, "cleanup")  # {{$.pipeline_job_uuid}}
    pod = k8s.CoreV1Api(SandboxClient(box.info).api_client()).read_namespaced_pod(pod_of(box, run.run_id, "make"), NS)
    assert pod.spec.service_account_name == "pipeline-runner-dspa" and pod.metadata.labels["pipeline/runid"] == run.run_id
    # KFP 2.14.3's task details: one per Argo node, no pod name and no error; children are node ids
    wf = k8s.CustomObjectsApi(SandboxClient(box.info).api_client()).list_namespaced_custom_object(
        "argoproj.io", "v1alpha1", NS, "workflows", label_selector=f"pipeline/runid={run.run_id}")["items"][0]
    details = done.run_details.task_details
    assert len(details) == len(wf["status"]["nodes"])
    assert all(d.pod_name is None and d.error is None and d.executor_detail is None for d in details)
    assert {"root", "root-driver", "make-driver", "executor", wf["metadata"]["name"]} <= {d.display_name for d in details}
    assert {c.pod_name for d in details for c in d.child_tasks or []} <= set(wf["status"]["nodes"])
    secret = SandboxClient(box.info).data_connection()["AWS_SECRET_ACCESS_KEY"]
    assert secret not in json.dumps(pod.to_dict(), default=str)  # S3 keys by secretKeyRef only, never in the spec
    keys = [o["Key"] for o in SandboxClient(box.info).s3().list_objects_v2(Bucket="kfp-ray", Prefix=f"small/{run.run_id}/make/")["Contents"]]
    assert any(k.endswith("/out") for k in keys), keys  # the Dataset, under the pipeline root


def test_a_failed_task_fails_the_run_skips_nothing_after_it_and_still_runs_the_exit_handler(box, kfp_client, small_package):
    run = kfp_client.create_run_from_pipeline_package(small_package, arguments={"fail": True}, run_name="small-fail")
    done = wait_run(kfp_client, run.run_id)
    t = tasks(done)
    assert done.state == "FAILED" and done.error is None  # KFP's run says that it failed, not why
    assert t["use"] == "FAILED" and t["cleanup"] == "SUCCEEDED"
    assert why(box, run.run_id) == "use: Error (exit code 1)"  # Argo's pod node message
    assert "failing as asked" in pod_log(box, run.run_id, "use")


def test_a_task_gets_only_what_its_packages_to_install_bring(box, kfp_client, tmp_path):
    """A task pod of a plain Python image is clean: pip installs the component's packages from
    the sandbox's index, and a module it imports without declaring fails as on RHOAI."""
    from kfp import compiler, dsl

    @dsl.component(base_image="registry.access.redhat.com/ubi9/python-311", packages_to_install=["six"])  # in the index
    def declared() -> str:
        import six

        return six.__name__

    @dsl.component(base_image="registry.access.redhat.com/ubi9/python-311")
    def undeclared() -> str:
        import yaml  # in the developer's venv, in no package this component installs

        return yaml.__name__

    @dsl.pipeline(name="clean")
    def clean():
        undeclared().after(declared())

    package = str(tmp_path / "clean.yaml")
    compiler.Compiler().compile(clean, package)
    run = kfp_client.create_run_from_pipeline_package(package, run_name="clean")
    done = wait_run(kfp_client, run.run_id)
    assert tasks(done) == {"declared": "SUCCEEDED", "undeclared": "FAILED"}
    assert "ModuleNotFoundError: No module named 'yaml'" in pod_log(box, run.run_id, "undeclared")


def test_a_pipeline_compiled_for_a_mirror_installs_from_the_mirror(box, kfp_client, tmp_path):
    """The disconnected-RHOAI path: `kfp-ray compile --pip-index-url` puts the mirror in every
    task's install line, and the tasks install from it (here a second index over the same
    wheelhouse, not the one the image's pip is configured with)."""
    import subprocess
    import sys

    from kfp_ray_sandbox.wheelhouse import IndexServer

    mirror = IndexServer().start()
    try:
        out = subprocess.run([sys.executable, "-m", "kfp_ray.pipelines", "compile", "--out", str(tmp_path),
                              "--pip-index-url", mirror.url, "--pip-trusted-host", "127.0.0.1"],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        run = kfp_client.create_run_from_pipeline_package(str(tmp_path / "kfp_ray_gc.yaml"), run_name="mirror")
        done = wait_run(kfp_client, run.run_id)
        assert done.state == "SUCCEEDED", why(box, run.run_id)
        assert mirror.served > 0  # kubernetes and kfp came from the mirror
    finally:
        mirror.stop()


def test_a_pipeline_compiled_with_image_runs_from_the_images_runtime(box, kfp_client, tmp_path):
    """`kfp-ray compile --image REF`: the executor embeds no runtime and installs nothing; the
    task imports kfp_ray from the image (its copy, as the Containerfile COPYs it), not from the
    checkout a pod cannot see."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "kfp_ray.pipelines", "compile", "--out", str(tmp_path),
                          "--image", "quay.io/example/kfp-ray-components:1.0"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    package = tmp_path / "kfp_ray_gc.yaml"
    assert "pip install" not in package.read_text()
    run = kfp_client.create_run_from_pipeline_package(str(package), run_name="image")
    done = wait_run(kfp_client, run.run_id)
    assert done.state == "SUCCEEDED", why(box, run.run_id)


def test_under_a_projects_limit_range_and_quota_runs_succeed_and_a_task_over_the_max_fails_with_its_message(
        box, kfp_client, small_package, tmp_path):
    """The compute policy many RHOAI projects have: a LimitRange (defaults for what a container
    leaves out, a max) and a ResourceQuota. Task pods ask for resources (kfp's set_cpu_limit &
    co. reach the pod as KFP 2.14's driver puts them), the policy's defaults fill the rest."""
    from kfp import compiler, dsl

    v1 = k8s.CoreV1Api(SandboxClient(box.info).api_client())
    v1.create_namespaced_limit_range(NS, {"metadata": {"name": "project-limits"}, "spec": {"limits": [{
        "type": "Container", "default": {"cpu": "1", "memory": "1Gi"},
        "defaultRequest": {"cpu": "100m", "memory": "256Mi"}, "max": {"cpu": "4", "memory": "16Gi"}}]}})
    v1.create_namespaced_resource_quota(NS, {"metadata": {"name": "project-quota"}, "spec": {"hard": {
        "requests.cpu": "8", "requests.memory": "32Gi", "limits.cpu": "16", "limits.memory": "64Gi", "pods": "30"}}})

    @dsl.component(base_image="registry.access.redhat.com/ubi9/python-311")
    def greedy() -> int:
        return 1

    @dsl.pipeline(name="greedy")
    def wants_too_much():
        greedy().set_cpu_limit("6").set_memory_limit("2Gi")

    package = str(tmp_path / "greedy.yaml")
    compiler.Compiler().compile(wants_too_much, package)
    try:
        ok = kfp_client.create_run_from_pipeline_package(small_package, arguments={"n": 2}, run_name="under-quota")
        over = kfp_client.create_run_from_pipeline_package(package, run_name="over-max")
        ok, over = wait_run(kfp_client, ok.run_id), wait_run(kfp_client, over.run_id)
        assert ok.state == "SUCCEEDED", why(box, ok.run_id)
        made = v1.read_namespaced_pod(pod_of(box, ok.run_id, "make"), NS).spec.containers[0].resources
        assert made.requests == {"cpu": "100m", "memory": "256Mi"} and made.limits == {"cpu": "1", "memory": "1Gi"}
        assert over.state == "FAILED"
        assert "is forbidden: maximum cpu usage per Container is 4, but limit is 6" in why(box, over.run_id)
    finally:
        v1.delete_namespaced_resource_quota("project-quota", NS)
        v1.delete_namespaced_limit_range("project-limits", NS)


def test_a_task_argument_over_the_kernels_limit_fails_at_exec_as_on_argo(box, kfp_client, tmp_path):
    """The executor input is one argument of the launcher (KFP's driver puts it there): an
    upstream output that takes it past MAX_ARG_STRLEN (131072 bytes) fails the executor pod at
    exec, as Argo's emissary fails there; one well under it runs. A pipeline parameter that
    big fails sooner: the root DAG driver's `--runtime_config` holds every parameter's value."""
    from kfp import compiler

    package = str(tmp_path / "echo.yaml")
    compiler.Compiler().compile(echo_pipeline(), package)
    e2big = 'StartError (exit code 128): runc create failed: unable to start container process: exec: ' \
            '"/var/run/argo/argoexec": argument list too long'
    runs = {name: kfp_client.create_run_from_pipeline_package(package, arguments=arguments, run_name=name).run_id
            for name, arguments in (("fits", {"size": 100_000}), ("too-big", {"size": 140_000}),
                                    ("big-parameter", {"text": "w" * 140_000}))}
    fits, too_big, big_parameter = (wait_run(kfp_client, run_id) for run_id in runs.values())
    assert fits.state == "SUCCEEDED", why(box, fits.run_id)
    assert too_big.state == "FAILED" and tasks(too_big) == {"make-text": "SUCCEEDED", "echo": "FAILED"}
    assert why(box, too_big.run_id) == f"echo: {e2big}"
    assert big_parameter.state == "FAILED" and tasks(big_parameter) == {}  # nothing got past the root DAG's driver
    assert why(box, big_parameter.run_id) == f"root-driver: {e2big}"


def blob_pipeline(name: str, distinct: int, chained: int):
    """Container components whose command carries ~120 KB that gzip cannot shrink (random
    base64): `distinct` different ones side by side (the Workflow's spec holds each once), or
    one of them `chained` times in a row (each run's nodes hold it four more times)."""
    import base64
    import random

    from kfp import dsl

    def blob(i: int):
        payload = base64.b64encode(random.Random(i).randbytes(90_000)).decode()

        @dsl.container_component
        def blob():
            return dsl.ContainerSpec(image="registry.access.redhat.com/ubi9/python-311",
                                     command=["sh", "-c", f"echo blob {i} # {payload}"])
        return blob

    @dsl.pipeline(name=name)
    def blobs():
        for i in range(distinct):
            blob(i)()
        one, previous = blob(1000), None
        for _ in range(chained):
            task = one().set_caching_options(False)  # the same component, no inputs: a cache hit otherwise
            if previous is not None:
                task.after(previous)
            previous = task

    return blobs


def test_parallel_for_runs_each_iteration_as_argo_lays_it_out_and_collects_the_outputs(box, kfp_client, tmp_path):
    from kfp import compiler

    package = str(tmp_path / "loops.yaml")
    compiler.Compiler().compile(loop_pipeline(), package)
    run = kfp_client.create_run_from_pipeline_package(package, arguments={"numbers": [2, 3, 4]}, run_name="loops")
    done = wait_run(kfp_client, run.run_id)
    assert done.state == "SUCCEEDED", (why(box, run.run_id), pod_log(box, run.run_id, "total")[-2000:])
    assert "total 29 of 3" in pod_log(box, run.run_id, "total")  # 4 + 9 + 16, collected from the three iterations
    v1 = k8s.CoreV1Api(SandboxClient(box.info).api_client())
    from kfp_ray.pipelines import run_tasks

    pods = run_tasks.executor_pods(v1, NS, run.run_id)
    assert len(pods["square"]) == 3 and len(pods["show"]) == 2
    shown = " ".join(v1.read_namespaced_pod_log(p, NS) for p in pods["show"])
    assert "item x 1" in shown and "item y 2" in shown  # each iteration got its item's fields
    wf = k8s.CustomObjectsApi(SandboxClient(box.info).api_client()).list_namespaced_custom_object(
        "argoproj.io", "v1alpha1", NS, "workflows", label_selector=f"pipeline/runid={run.run_id}")["items"][0]
    names = {n["displayName"]: n for n in wf["status"]["nodes"].values()}
    assert {"iteration-iterations(0:0)", "iteration-iterations(2:2)", "iteration-item", "iteration-item-driver"} <= set(names)
    assert "iteration-iterations(3:3)" not in names and names["iteration-iterations"]["type"] == "TaskGroup"
    assert {n["phase"] for n in wf["status"]["nodes"].values()} == {"Succeeded"}
    iterations = [n for n in wf["status"]["nodes"].values() if n["displayName"].startswith("iteration-iterations(")]
    assert len(iterations) == 5  # 2 + 3
    # parallelism 1: the literal loop's second iteration started once its first had ended
    literal = sorted((n for n in iterations if n["templateName"].startswith("comp-for-loop-2")), key=lambda n: n["name"])
    assert len(literal) == 2 and literal[1]["startedAt"] >= literal[0]["finishedAt"]


def test_a_cached_task_runs_no_pod_the_second_time_and_succeeds_as_on_kfp_2_14(box, kfp_client, tick_package):
    """cachingOptions.enableCache (the SDK's default): the same inputs, image and command in the
    same pipeline hit the cache: the driver's cached decision skips the executor pod."""
    first, second = [wait_run(kfp_client, kfp_client.create_run_from_pipeline_package(
        tick_package, arguments={"n": 7}, run_name=f"cached-{i}").run_id) for i in (1, 2)]
    v1 = k8s.CoreV1Api(SandboxClient(box.info).api_client())
    from kfp_ray.pipelines import run_tasks

    assert tasks(first) == tasks(second) == {"tick": "SUCCEEDED"}
    assert len(run_tasks.executor_pods(v1, NS, first.run_id)["tick"]) == 1
    assert run_tasks.executor_pods(v1, NS, second.run_id) == {}
    states = {d.display_name: d.state for d in second.run_details.task_details}
    assert states["executor"] == "SKIPPED" and states["tick-driver"] == "SUCCEEDED"


def test_a_workflow_over_etcds_limit_is_refused_at_creation_as_kfp_refuses_it(kfp_client, tmp_path):
    """Thirteen distinct 120 KB containers: a Workflow spec of ~1.6 MB, which etcd refuses, so
    KFP's CreateRun fails with its wording and keeps no run."""
    from kfp import compiler
    from kfp_server_api.exceptions import ApiException

    package = str(tmp_path / "wide.yaml")
    compiler.Compiler().compile(blob_pipeline("wide", distinct=13, chained=0), package)
    with pytest.raises(ApiException) as exc:
        kfp_client.create_run_from_pipeline_package(package, run_name="too-wide")
    assert exc.value.status == 500
    assert ("Failed to create a new run: InternalServerError: Failed to create a workflow for (): "
            "etcdserver: request is too large") in exc.value.body
    assert not [r for r in kfp_client.list_runs(page_size=100).runs or [] if r.display_name == "too-wide"]


def test_a_workflow_whose_status_outgrows_argos_limit_errors_and_nothing_more_runs(box, kfp_client, tmp_path):
    """One 120 KB container three times in a row: the spec fits, but each task's nodes carry
    it four times (driver input, pod spec patch out, executor and pod inputs), random enough
    that Argo's gzip cannot bring status.nodes under 1 MiB: the Workflow goes to Error with
    Argo's message and the tasks after it never start."""
    from kfp import compiler

    package = str(tmp_path / "long.yaml")
    compiler.Compiler().compile(blob_pipeline("long", distinct=0, chained=3), package)
    run = kfp_client.create_run_from_pipeline_package(package, run_name="too-long")
    done = wait_run(kfp_client, run.run_id)
    assert done.state == "FAILED"
    message = why(box, run.run_id)
    assert message.startswith("workflow is longer than maximum allowed size. compressed size")
    assert "> maxSize 1048576Tried to offload but encountered error: offload node status is not supported" in message
    assert len([state for state in tasks(done).values() if state == "SUCCEEDED"]) < 3
    wf = k8s.CustomObjectsApi(SandboxClient(box.info).api_client()).list_namespaced_custom_object(
        "argoproj.io", "v1alpha1", NS, "workflows", label_selector=f"pipeline/runid={run.run_id}")["items"][0]
    assert wf["status"]["phase"] == "Error" and wf["status"]["message"] == message


def test_a_missing_required_parameter_is_refused_at_creation(kfp_client):
    """KFP 2.14.3 checks a run's inputs when it compiles the Workflow (v2_template.go
    validatePipelineJobInputs): no run is made."""
    from kfp_server_api.exceptions import ApiException

    from kfp_ray.pipelines import registry

    with pytest.raises(ApiException) as exc:
        kfp_client.create_run_from_pipeline_package(str(registry.compiled_path("ray_training")), arguments={},
                                                    run_name="no-entrypoint")
    assert exc.value.status == 400
    assert ("invalid pipeline job inputs: Invalid input error: parameter entrypoint is not optional, yet has "
            "neither default value nor user provided value") in exc.value.body


def cpu_in_use(box) -> float:
    return helpers.cpu_in_use(k8s.CustomObjectsApi(SandboxClient(box.info).api_client()))


def clusters_of(box, run_id) -> list[str]:
    co = k8s.CustomObjectsApi(SandboxClient(box.info).api_client())
    items = co.list_namespaced_custom_object("ray.io", "v1", NS, "rayclusters",
                                             label_selector=f"kfp-ray.io/run-id={run_id}")["items"]
    return [c["metadata"]["name"] for c in items]


def start_long_job(box, kfp_client, name):
    from kfp_ray.pipelines import registry

    run = kfp_client.create_run_from_pipeline_package(
        str(registry.compiled_path("ray_training")), run_name=name,
        arguments={"entrypoint": SLEEP_JOB, "local_queue": box.info["local_queue"], "head_memory": "2Gi",
                   "num_workers": 0})  # a head alone: what is tested is the run's end, not the cluster's shape
    read = run_reader(kfp_client)
    eventually(lambda: tasks(read(run.run_id)).get("follow-ray-job") == "RUNNING",
               timeout=240, interval=0.5, what="the job to be followed")
    # the follow task is past its start (pip, imports) and holds its SIGTERM handler: it says
    # the job is RUNNING; a signal before that point leaves the cluster to the lease sweeper
    eventually(lambda: ": RUNNING" in pod_log(box, run.run_id, "follow-ray-job"), timeout=120, interval=0.5,
               what="the follow task to see the job run")
    assert clusters_of(box, run.run_id) and cpu_in_use(box) > 0
    return run


def test_terminate_mid_job_runs_the_exit_handler_releases_the_cluster_and_ends_failed(box, sbx, kfp_client):
    run = start_long_job(box, kfp_client, "terminate-me")
    kfp_client.terminate_run(run.run_id)
    assert kfp_client.get_run(run.run_id).state in ("CANCELING", "FAILED")
    done = wait_run(kfp_client, run.run_id, timeout=180)
    t = tasks(done)
    assert done.state == "FAILED"  # KFP 2.17 on Argo: the terminated workflow fails (README)
    assert t["follow-ray-job"] == "FAILED"  # its pod stopped at the terminate's deadline
    assert t["teardown-ray-cluster"] == "SUCCEEDED"  # the exit handler still ran
    assert "follow-ray-job: Step exceeded its deadline" in why(box, run.run_id)
    eventually(lambda: not clusters_of(box, run.run_id) and cpu_in_use(box) == 0, timeout=60,
               what="the RayCluster gone and the quota back to 0")


def test_delete_mid_job_removes_its_pods_and_the_task_sigterm_path_releases_the_cluster(box, sbx, kfp_client):
    run = start_long_job(box, kfp_client, "delete-me")
    kfp_client.delete_run(run.run_id)
    with pytest.raises(Exception) as exc:
        kfp_client.get_run(run.run_id)
    assert exc.value.status == 404
    v1 = k8s.CoreV1Api(SandboxClient(box.info).api_client())
    eventually(lambda: not v1.list_namespaced_pod(NS, label_selector=f"pipeline/runid={run.run_id}").items,
               timeout=90, what="the run's pods gone")
    # no exit handler runs after a delete: the follow task's SIGTERM path deletes the cluster
    eventually(lambda: not clusters_of(box, run.run_id) and cpu_in_use(box) == 0, timeout=90,
               what="the RayCluster gone and the quota back to 0")


def test_a_recurring_run_fires_on_its_period_one_run_at_a_time(box, kfp_client, tick_package):
    experiment = kfp_client.create_experiment("recurring")
    rr = kfp_client.create_recurring_run(experiment.experiment_id, "every-second", pipeline_package_path=tick_package,
                                         interval_second=1, max_concurrency=1, no_catchup=True, params={"n": 2})
    try:
        assert kfp_client.get_recurring_run(rr.recurring_run_id).status == "ENABLED"

        def finished_runs():
            runs = kfp_client.list_runs(experiment_id=experiment.experiment_id, page_size=50).runs or []
            done = [r for r in runs if r.recurring_run_id == rr.recurring_run_id and r.state in DONE]
            return done if len(done) >= 2 else None

        runs = sorted(eventually(finished_runs, timeout=120, interval=0.5, what="two runs of the recurring run"),
                      key=lambda r: r.created_at)
        assert all(r.state == "SUCCEEDED" for r in runs)
        for earlier, later in zip(runs, runs[1:], strict=False):  # max_concurrency 1: a run starts after the one before ended
            assert later.created_at >= earlier.finished_at
        listed = kfp_client.list_recurring_runs(experiment_id=experiment.experiment_id).recurring_runs
        assert [r.recurring_run_id for r in listed] == [rr.recurring_run_id]
        kfp_client.disable_recurring_run(rr.recurring_run_id)
        assert kfp_client.get_recurring_run(rr.recurring_run_id).status == "DISABLED"
    finally:
        kfp_client.delete_recurring_run(rr.recurring_run_id)
    with pytest.raises(Exception) as exc:
        kfp_client.get_recurring_run(rr.recurring_run_id)
    assert exc.value.status == 404


# the training pipelines run green by `run --local` (tests/pipelines/test_run_*.py), which moves onto this server
@pytest.mark.parametrize("name, arguments, outputs", [
    ("kfp_ray_gc", {}, None),
])
@helpers.on_platforms("rhoai-3.3", "rhoai-2.25")
def test_a_compiled_pipeline_runs_green_through_the_server(box, sbx, kfp_client, name, arguments, outputs, tmp_path):
    """As uploaded from compiled/ (for RHOAI 2.x as `compile --rhoai 2.25` rewrites it): the data
    connection reaches its tasks only through the YAML's kfp-kubernetes settings, the queue is the
    namespace's, the identity the runner's."""
    from kfp_ray.pipelines import compat, registry

    path = str(registry.compiled_path(name))
    todo = compat.needs(compat.parse_version(box.platform.rhoai), "")
    if todo:
        rewritten = tmp_path / f"{name}.yaml"
        rewritten.write_text(compat.rewrite(open(path).read(), todo))
        path = str(rewritten)
    if "local_queue" in open(path).read():
        arguments = {"local_queue": box.info["local_queue"], **arguments}
    pipeline = kfp_client.upload_pipeline(path, pipeline_name=f"green-{name}")
    version = kfp_client.list_pipeline_versions(pipeline.pipeline_id).pipeline_versions[0]
    experiment = kfp_client.create_experiment(f"green-{name}")
    run = kfp_client.run_pipeline(experiment.experiment_id, f"green-{name}", pipeline_id=pipeline.pipeline_id,
                                  version_id=version.pipeline_version_id, params=arguments)
    done = wait_run(kfp_client, run.run_id, timeout=400)
    assert done.state == "SUCCEEDED", (why(box, run.run_id), tasks(done))
    assert set(tasks(done).values()) == {"SUCCEEDED"}
    if outputs:
        task, artifact = outputs
        keys = [o["Key"] for o in SandboxClient(box.info).s3().list_objects_v2(Bucket="kfp-ray").get("Contents", [])
                if f"/{run.run_id}/{task}/" in o["Key"]]
        assert any(k.endswith(f"/{artifact}") for k in keys), keys  # under the pipeline root
    assert not clusters_of(box, run.run_id) and cpu_in_use(box) == 0
