"""The peer's design as a baseline (issue 31): Red Hat's own Ray pipeline component.

red-hat-data-services/pipelines-components, components/data_processing/parse_and_chunk/
component.py (read at dd8d0c0, its last code change aab1750, 2026-05-28): one task that
- builds a RayJob with the CodeFlare SDK (ManagedClusterConfig: requests = limits, memory in
  GB; RayJob(ttl_seconds_after_finished=300), its cluster queued by the SDK's Kueue label),
- ships the job's code as an environment variable that the entrypoint writes to /tmp,
- submits it, then adds the data connection's keys to every Ray container as secretKeyRef env
  (a merge patch of spec.rayClusterSpec while Kueue holds the RayJob suspended),
- polls the RayJob every 10 s until its cluster is ready (readyWorkerReplicas and state, 600 s),
- then every 30 s until status.jobStatus is SUCCEEDED or FAILED (4 h),
- and deletes nothing: KubeRay deletes the cluster ttlSecondsAfterFinished (300 s) after the
  job ends; the RayJob stays.
Written here as a one-task KFP pipeline running the same job as kfp-ray's overhead benchmark
(pipelines/jobs/xgboost_tune.py with storage.py), with the same cluster shape. Only what the
peer does is here: no lease, no log streaming, no cleanup on failure. Two departures, each so that
the job runs at all here: the keys go into the create rather than a patch after it (the sandbox's
Kueue admits before the patch lands), and the entrypoint is one `python -c` (KubeRay's submitter
would split a `&&` chain in its bash line)."""

# no `from __future__ import annotations`: kfp reads annotations as types

from kfp import dsl

from kfp_ray.components._build import BASE_IMAGE

# ttl_seconds_after_finished: KubeRay deletes the cluster this long after the job ends (the
# component's `ttl_s` default: its source runs alone in the task pod, so it cannot name this)
TTL_S = 300


@dsl.component(base_image=BASE_IMAGE, packages_to_install=["codeflare-sdk==0.34.0", "kubernetes==30.1.0"])
def peer_rayjob(namespace: str, entrypoint: str, files: dict, pip: list, env_vars: dict, data_connection: str,
                local_queue: str, head_cpus: int, head_memory_gb: int, num_workers: int, worker_cpus: int,
                worker_memory_gb: int, ready_poll_s: int = 10, ready_wait_s: int = 600, job_poll_s: int = 30,
                job_wait_s: int = 14400, ttl_s: int = 300) -> str:
    """Run a Ray job as Red Hat's parse_and_chunk component does (benchmarks/peer.py)."""
    import time

    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    try:
        k8s_config.load_incluster_config()
    except k8s_config.ConfigException:
        k8s_config.load_kube_config()
    from codeflare_sdk import ManagedClusterConfig, RayJob

    name = f"peer-{int(time.time())}"
    cluster_config = ManagedClusterConfig(
        head_cpu_requests=head_cpus, head_cpu_limits=head_cpus, head_memory_requests=head_memory_gb,
        head_memory_limits=head_memory_gb, num_workers=num_workers, worker_cpu_requests=worker_cpus,
        worker_cpu_limits=worker_cpus, worker_memory_requests=worker_memory_gb, worker_memory_limits=worker_memory_gb)
    # the code as env vars the entrypoint writes out (the peer's ENTRYPOINT_SCRIPT, one per file), then
    # the job run in that folder. One `python -c "..."` with no shell syntax outside its quotes: KubeRay's
    # submitter puts the entrypoint unquoted in a bash line (common.GetK8sJobCommand), so a `&&` there
    # would end the Ray job's entrypoint and run the rest in the submitter pod.
    import shlex

    argv = shlex.split(entrypoint)[1:]  # `python <script> <args>`
    writes = ";".join(f"open('{path}','w').write(os.environ['PEER_FILE_{i}'])" for i, path in enumerate(files))
    script = (f"import os,sys,runpy;os.makedirs('/tmp/peer',exist_ok=True);os.chdir('/tmp/peer');{writes};"
              f"sys.path.insert(0,'.');sys.argv={argv!r};runpy.run_path(sys.argv[0],run_name='__main__')")
    job = RayJob(job_name=name, cluster_config=cluster_config, namespace=namespace,
                 entrypoint=f'python -c "{script}"',
                 runtime_env={"pip": pip, "env_vars": {**env_vars, **{f"PEER_FILE_{i}": text
                                                                      for i, text in enumerate(files.values())}}},
                 ttl_seconds_after_finished=ttl_s, local_queue=local_queue or None)
    custom = k8s_client.CustomObjectsApi()
    job._api.api = custom  # the peer's fix: the SDK's client tried a kubeconfig first
    where = dict(group="ray.io", version="v1", namespace=namespace, plural="rayjobs", name=name)
    keys = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_S3_ENDPOINT", "AWS_S3_BUCKET")
    submit = job._api.submit_job

    def with_keys(k8s_namespace, job):
        # The peer merge-patches these into spec.rayClusterSpec right after the create, while
        # Kueue holds the RayJob suspended. The sandbox's Kueue admits within that GET + PATCH,
        # so KubeRay would build the cluster without them (seen): here they go into the create.
        job = k8s_client.ApiClient().sanitize_for_serialization(job)  # the SDK's body holds model objects
        spec = job["spec"]["rayClusterSpec"]
        for group in [spec["headGroupSpec"], *spec.get("workerGroupSpecs", [])]:
            for container in group["template"]["spec"]["containers"]:
                container.setdefault("env", []).extend(
                    {"name": k, "valueFrom": {"secretKeyRef": {"name": data_connection, "key": k}}} for k in keys)
        return submit(k8s_namespace=k8s_namespace, job=job)

    job._api.submit_job = with_keys
    job.submit()
    print(f"RayJob {name} submitted; waiting for Kueue admission and the cluster...", flush=True)
    deadline = time.time() + ready_wait_s
    while True:
        cluster = (custom.get_namespaced_custom_object(**where).get("status") or {}).get("rayClusterStatus") or {}
        if str(cluster.get("readyWorkerReplicas", 0)) == str(num_workers) and cluster.get("state") == "ready":
            break
        if time.time() > deadline:
            raise TimeoutError(f"RayCluster of {name} not ready within {ready_wait_s}s")
        time.sleep(ready_poll_s)
    print("cluster ready; waiting for the job...", flush=True)
    deadline = time.time() + job_wait_s
    while True:
        status = (custom.get_namespaced_custom_object(**where).get("status") or {}).get("jobStatus")
        if status == "SUCCEEDED":
            return name
        if status == "FAILED":
            raise RuntimeError(f"RayJob '{name}' failed.")
        if time.time() > deadline:
            raise TimeoutError(f"RayJob '{name}' did not finish within {job_wait_s}s")
        time.sleep(job_poll_s)


@dsl.pipeline(name="peer-rayjob", description="Red Hat's parse_and_chunk design, for the overhead benchmark")
def peer_pipeline(namespace: str, entrypoint: str, files: dict, pip: list, env_vars: dict, data_connection: str,
                  local_queue: str, head_cpus: int = 3, head_memory_gb: int = 4, num_workers: int = 0,
                  worker_cpus: int = 2, worker_memory_gb: int = 2):  # xgboost_tune's cluster shape
    peer_rayjob(namespace=namespace, entrypoint=entrypoint, files=files, pip=pip, env_vars=env_vars,
                data_connection=data_connection, local_queue=local_queue, head_cpus=head_cpus,
                head_memory_gb=head_memory_gb, num_workers=num_workers, worker_cpus=worker_cpus,
                worker_memory_gb=worker_memory_gb).set_caching_options(False)


def compile_to(path) -> str:
    from kfp import compiler

    compiler.Compiler().compile(peer_pipeline, str(path))
    return str(path)


def arguments(box, sbx, tag: str, params: dict, entrypoint: str, dataset: str) -> dict:
    """The run's inputs: overhead's xgboost job (`entrypoint`, `dataset` staged under bench/<tag>),
    as overhead.by_hand runs it."""
    from kfp_ray import datasets
    from kfp_ray.driver import environ
    from kfp_ray.jobs import read_requirements

    from . import harness

    jobs_dir = harness.ROOT / "pipelines" / "jobs"
    prefix = f"s3://{box.info['s3_bucket']}/bench/{tag}"
    with environ(sbx.data_connection()):
        datasets.stage(dataset, prefix + "/data")
    return {"namespace": box.info["namespace"], "data_connection": box.info["data_connection"],
            "local_queue": params.get("local_queue", ""),
            "entrypoint": entrypoint,
            "files": {n: (jobs_dir / n).read_text() for n in ("xgboost_tune.py", "storage.py")},
            "pip": read_requirements("requirements/xgboost_tune.txt", "jobs", str(harness.ROOT / "pipelines")),
            "env_vars": {"KFP_RAY_DATA": prefix + "/data", "KFP_RAY_OUTPUT": prefix}}
