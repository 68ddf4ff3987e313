"""The shape every kfp-ray training pipeline shares: stage data in S3, run the Ray job on a
Kueue-queued cluster, publish its results, and tear everything down in an exit handler
whatever happens. The job runs one of two ways, as the pipeline's `lifecycle` parameter says:
"raycluster" (provision a RayCluster, then submit and follow the job in one task) or "rayjob" (one
run_ray_job task: a KubeRay RayJob that creates and deletes its own cluster)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from kfp import dsl, kubernetes

from kfp_ray.components.follow_ray_job.component import follow_ray_job_with_code
from kfp_ray.components.provision_ray_cluster.component import provision_ray_cluster
from kfp_ray.components.publish_training_results.component import publish_training_results
from kfp_ray.components.run_ray_job.component import run_ray_job, run_ray_job_with_code
from kfp_ray.components.stage_dataset.component import stage_dataset
from kfp_ray.components.teardown_ray_cluster.component import teardown_ray_cluster
from kfp_ray.pipelines.sizes import size_tasks

RUN_ID = dsl.PIPELINE_JOB_ID_PLACEHOLDER
JOBS = Path(__file__).resolve().parent / "jobs"


def job_tasks(job: str):
    """The follow_ray_job (which submits too) and run_ray_job components carrying demo job `job`
    (pipelines/jobs/<job>.py, its requirements file and storage.py) as `code/`: each pipeline
    carries its own job only, without comments and docstrings (lines kept: a traceback's line
    numbers are the repository's), since every byte of a task is copied several times into
    the run's Argo Workflow."""
    files = {f"{job}.py", "storage.py", f"requirements/{job}.txt"}
    return follow_ray_job_with_code(JOBS, files, strip_code=True), run_ray_job_with_code(JOBS, files, strip_code=True)
# The data connection secret's keys, as RHOAI writes them, mounted as the same env names.
# The dashboard's data connection form leaves the region empty when not given: optional
# (the runtime and the jobs then use us-east-1, which S3-compatible stores accept).
DATA_CONNECTION_KEYS = {k: k for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_S3_ENDPOINT",
                                       "AWS_S3_BUCKET")}
OPTIONAL_DATA_CONNECTION_KEYS = {"AWS_DEFAULT_REGION": "AWS_DEFAULT_REGION"}


def with_data_connection(task, data_connection):
    """The data connection's keys as env. kfp-kubernetes 2.17 `optional` is per call (one
    secretAsEnv entry each); KFP 2.17's driver (backend/src/v2/driver/k8s.go) makes it each
    key's secretKeyRef.optional, so a missing region leaves AWS_DEFAULT_REGION unset instead
    of failing the pod with CreateContainerConfigError."""
    kubernetes.use_secret_as_env(task, secret_name=data_connection, secret_key_to_env=DATA_CONNECTION_KEYS)
    kubernetes.use_secret_as_env(task, secret_name=data_connection, secret_key_to_env=OPTIONAL_DATA_CONNECTION_KEYS,
                                 optional=True)
    return task


def data_connection_env(secret: dict[str, str]) -> dict[str, str]:
    """The env a task pod gets from the data connection through with_data_connection (kfp.local
    does not apply kfp-kubernetes settings: `run --local` and the tests give it this). A
    missing required key fails as the kubelet fails the pod."""
    missing = [k for k in DATA_CONNECTION_KEYS if k not in secret]
    if missing:
        raise KeyError(f"couldn't find key {missing[0]} in the data connection secret (CreateContainerConfigError)")
    keys = {**DATA_CONNECTION_KEYS, **OPTIONAL_DATA_CONNECTION_KEYS}
    return {env: secret[key] for key, env in keys.items() if key in secret}


def with_data_connection_keys(task, data_connection):
    """The data connection's keys as env, every one optional: for redaction only (redact.py
    hides the values of the env it finds), in a task that must start even when the data
    connection is missing or wrong (the teardown)."""
    keys = {**DATA_CONNECTION_KEYS, **OPTIONAL_DATA_CONNECTION_KEYS}
    kubernetes.use_secret_as_env(task, secret_name=data_connection, secret_key_to_env=keys, optional=True)
    return task


# Task retries (issue 25 item 9): only on the tasks whose rerun takes up where the failed
# attempt left off and repeats nothing, since KFP retries a task whatever made it fail.
# - follow_ray_job, which submits the job first in the pipelines: the submission id comes from
#   run and task, so a retry finds the job the first attempt submitted and follows it again:
#   after a failed submission (the cluster is left, its lease handed on for a retry,
#   lease.HANDOFF_S, longer than the backoff), a dashboard outage that outlasted its window, or
#   a killed pod. Once the job was over the first attempt deleted the cluster, and a retry
#   says so at once (tasks.follow) instead of waiting out an unreachable dashboard.
# - teardown_ray_cluster (the exit handler): idempotent; nothing left is success.
# Not retried: provision_ray_cluster adopts its cluster after a kill, but its failures are
# verdicts reached at the end of admission_timeout or startup_timeout (no quota, no queue, an
# image that does not pull), and a retry would wait them out again; run_ray_job deletes its
# RayJob on any failure, so a retry would run the job again from its start; run_ray_driver's
# retry would run the driver function again from its start (and its cluster is gone); stage_
# dataset and publish_training_results hold no cluster and their S3 calls retry within the
# task; sweep_ray_clusters' recurring run is its own retry.
# What RHOAI runs honours these fields: KFP 2.14.3's argocompiler (backend/src/v2/compiler/
# argocompiler/container.go, addContainerExecutorTemplate, getTaskRetryStrategyFromInput) makes
# a task's retryPolicy its executor template's Argo retryStrategy: limit maxRetryCount, backoff
# duration backoffDuration, factor backoffFactor, maxDuration backoffMaxDuration (seconds). It
# sets no retryPolicy, so Argo's default OnFailure applies: a container that failed (non-zero
# exit, OOMKilled) is retried, a pod lost with its node (Error) is not. Argo (v3.6.7, its go.mod)
# counts maxDuration from the first attempt's start and gives retried pods that deadline, so it
# is a week here, longer than any follow (job_timeout defaults to a day). Terminate retries
# nothing (Argo retries no node past the workflow's deadline).
RETRY = {"num_retries": 2, "backoff_duration": "30s", "backoff_factor": 2.0, "backoff_max_duration": f"{7 * 86400}s"}


def retried(task):
    """The task, with RETRY: 2 more attempts, 30 s then 60 s after a failure."""
    return task.set_retry(**RETRY)


@contextlib.contextmanager
def exit_handlers(title: str, data_connection):
    """The run's tasks go inside; whatever becomes of them, the teardown (the exit task) then
    deletes the run's clusters and writes a report that says where the run failed and why.
    The report shows the end of failed tasks' logs, which may hold what a Ray task printed:
    the teardown gets the data connection's keys (optional) so that redact.py hides them."""
    teardown = with_data_connection_keys(retried(teardown_ray_cluster(run_id=RUN_ID, title=title)), data_connection)
    teardown.set_caching_options(False)
    with dsl.ExitHandler(teardown, name="train-on-ray"):
        yield


def provision(data_connection, **inputs):
    """The run's provision task: its cluster's name from the run and this task's identity."""
    return provision_ray_cluster(run_id=RUN_ID, task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER,
                                 task_id=dsl.PIPELINE_TASK_ID_PLACEHOLDER, data_connection=data_connection, **inputs)


def publish_run(stage, cluster, runner, log, title, data_connection, admitted=None, **facts):
    """The run's publish task. `runner`: the task that used the cluster (follow_ray_job, or
    run_ray_driver), whose metrics, duration and teardown time it shows; `log`: its log;
    `facts`: the run's parameters the report shows (image, lifecycle, dataset, entrypoint)."""
    return with_data_connection(publish_training_results(
        output_uri=stage.outputs["output_uri"], run_id=RUN_ID, job_log=log, job_metrics=runner.outputs["metrics"],
        title=title, cluster_name=cluster.outputs["cluster_name"], cluster_shape=cluster.outputs["shape"],
        queued_seconds=cluster.outputs["queued_seconds"], starting_seconds=cluster.outputs["starting_seconds"],
        job_seconds=runner.outputs["duration_seconds"], teardown_seconds=runner.outputs["teardown_seconds"],
        **({"admitted": admitted} if admitted is not None else {}), **facts),
        data_connection)


LIFECYCLE_ARG = """
    Args:
        lifecycle: How the Ray cluster lives. "raycluster" (the default): kfp-ray provisions a
            RayCluster, submits the job and streams its log, then deletes the cluster; a retried
            task adopts its cluster. "rayjob": one KubeRay RayJob; KubeRay creates the cluster,
            submits the job and deletes the cluster when the job ends or its deadline
            (startup_timeout + job_timeout) passes, even if every pipeline pod is gone.
    """


def with_lifecycle_doc(summary: str):
    """A training pipeline's docstring: `summary`, then its `lifecycle` parameter explained, as
    the RHOAI UI shows it (KFP reads the docstring when @dsl.pipeline applies: put this below it)."""
    def mark(fn):
        fn.__doc__ = summary + "\n" + LIFECYCLE_ARG
        return fn
    return mark


def train_on_ray(*, follow, entrypoint, working_dir, dataset, data_connection, s3_prefix, local_queue, image,
                 num_workers, head_cpu, head_memory, worker_cpu, worker_memory, worker_gpus, tolerations,
                 admission_timeout, startup_timeout, job_timeout, priority_class="", max_preemptions=3, pip=None, requirements_file="",
                 install_requirements=True, pip_index_url="", pip_trusted_host="", title="Ray training run",
                 lifecycle="raycluster", run=run_ray_job):
    """Wire the tasks of a training run inside a pipeline function (`title`: the HTML report's). Every task has
    caching off: each run must get a cluster and a job of its own. `lifecycle` (the pipeline's parameter) picks
    the branch: run_ray_job (`run`, the RayJob counterpart of `follow`, with the same code), or provision then
    follow_ray_job (`follow`), which submits the job and follows it. Returns the two branches' tasks that ran
    the job."""
    shape = dict(local_queue=local_queue, priority_class=priority_class, image=image, num_workers=num_workers, head_cpu=head_cpu,
                 head_memory=head_memory, worker_cpu=worker_cpu, worker_memory=worker_memory, worker_gpus=worker_gpus,
                 tolerations=tolerations, admission_timeout=admission_timeout, startup_timeout=startup_timeout,
                 pip_index_url=pip_index_url, pip_trusted_host=pip_trusted_host)
    # the run's parameters, for the report: free text as inputs of their own, the rest as one JSON
    # object (an f-string: KFP resolves each channel in it; these values hold no quotes)
    facts = dict(image=image, lifecycle=lifecycle, dataset=dataset, entrypoint=entrypoint, parameters=(
        f'{{"local_queue": "{local_queue}", "num_workers": "{num_workers}", "head": "{head_cpu} CPU, {head_memory}", '
        f'"worker": "{worker_cpu} CPU, {worker_memory}, {worker_gpus} GPU", "s3_prefix": "{s3_prefix}", '
        f'"admission_timeout": "{admission_timeout}", "startup_timeout": "{startup_timeout}", '
        f'"job_timeout": "{job_timeout}", "priority_class": "{priority_class}"}}'))
    code = dict(entrypoint=entrypoint, run_id=RUN_ID, task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER,
                working_dir=working_dir, pip=pip or [], requirements_file=requirements_file,
                install_requirements=install_requirements)

    def staged():
        """Inside each branch, so that the branch starts at once and provision runs beside it;
        it checks `lifecycle` (a third branch runs only it, for a value that is neither)."""
        stage = with_data_connection(stage_dataset(dataset=dataset, run_id=RUN_ID, s3_prefix=s3_prefix,
                                                   lifecycle=lifecycle), data_connection)
        stage.set_caching_options(False)
        stage.set_display_name("stage-dataset")  # one name in every branch: the UI's, the artifacts' path's
        return stage, {"KFP_RAY_DATA": stage.outputs["data_uri"], "KFP_RAY_OUTPUT": stage.outputs["output_uri"]}

    with exit_handlers(title, data_connection):
        with dsl.If(lifecycle == "raycluster", name="raycluster"):
            stage, env_vars = staged()
            cluster = provision(data_connection, **shape)
            # One task submits the job and follows it (a task fewer on the critical path). It prints
            # the job's log: with the data connection in its env, redact.py hides its keys there too
            # (the Ray pods have them, so a job may print them); an s3:// working_dir reads with them.
            followed = with_data_connection(follow(
                dashboard_url=cluster.outputs["dashboard_url"], env_vars=env_vars,
                cluster_name=cluster.outputs["cluster_name"], namespace=cluster.outputs["namespace"],
                timeout=job_timeout, max_preemptions=max_preemptions, admission_timeout=admission_timeout,
                startup_timeout=startup_timeout, **code), data_connection)
            publish = publish_run(stage, cluster, followed, followed.outputs["job_log"], title, data_connection,
                                  admitted=cluster.outputs["admitted"], **facts)
            for task in (cluster, followed, publish):
                task.set_caching_options(False)
            retried(followed)
        with dsl.Elif(lifecycle == "rayjob", name="rayjob"):
            stage, env_vars = staged()  # the RayJob's runtime_env names the data: created once staged
            # It streams the job's log: with the data connection in its env, redact.py hides its keys there.
            job = with_data_connection(run(task_id=dsl.PIPELINE_TASK_ID_PLACEHOLDER, data_connection=data_connection,
                                           job_timeout=job_timeout, env_vars=env_vars, max_preemptions=max_preemptions,
                                           **code, **shape),
                                       data_connection)
            published = publish_run(stage, job, job, job.outputs["job_log"], title, data_connection, **facts)
            published.set_display_name("publish-training-results")
            for task in (job, published):
                task.set_caching_options(False)
        with dsl.Else(name="unknown-lifecycle"):
            staged()  # fails: names the lifecycle parameter and its choices
    size_tasks()
    return job, followed
