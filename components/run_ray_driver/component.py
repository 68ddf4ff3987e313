from pathlib import Path
from typing import NamedTuple

from kfp.dsl import Artifact, Metrics, Output

from kfp_ray.components._build import DRIVER, ray_component


def run_ray_driver(
    dashboard_url: str,
    cluster_name: str,
    driver: str,
    log: Output[Artifact],
    metrics: Output[Metrics],
    namespace: str = "",
    function: str = "main",
    kwargs: str = "{}",
    data_uri: str = "",
    output_uri: str = "",
    delete_cluster: bool = True,
    lease_seconds: int = 600,
    renew_every_seconds: int = 60,
) -> NamedTuple("DriverOutputs", [("result", str), ("duration_seconds", float), ("teardown_seconds", float)]):
    """Run a Python function as a Ray client driver of a provisioned RayCluster
    (ray.init("ray://<cluster>-head-svc.<namespace>.svc:10001"), as CodeFlare's second demo
    notebook does), streaming its output, and its Ray tasks' output, into this task's log.

    On OpenShift AI the cluster's Ray client port is mutual TLS: the task makes a client
    certificate from the cluster's CA secret, as the CodeFlare SDK's generate_cert does, and
    removes it afterwards. The task's Ray must be the cluster's version: it checks that
    first, and fails with what to change when they differ. While the function runs the
    cluster's lease is renewed; when it is over, or the run is cancelled, the cluster is
    deleted (delete_cluster). Turn caching off for this task.

    Args:
        dashboard_url: provision_ray_cluster's dashboard_url output (for the version check).
        cluster_name: provision_ray_cluster's cluster_name output.
        driver: The Python file that defines the function: a path in this component's
            embedded code ("code/train.py" for components made by run_ray_driver_with_code),
            or an s3:// URI read with the data connection.
        namespace: The cluster's namespace (provision's namespace output); empty: the
            pipeline's own.
        function: The function to call, with kwargs as its keyword arguments. It runs after
            ray.init(), so it can use Ray, Ray Train and Ray Data directly.
        kwargs: The function's keyword arguments as a JSON object, e.g. '{"epochs": 8}'. Text,
            so that a pipeline can build it from its parameters with an f-string (KFP 2.17's
            backend leaves parameter placeholders inside dict constants unresolved).
        data_uri: The run's S3 data folder (stage_dataset's data_uri): KFP_RAY_DATA while the
            function runs.
        output_uri: The run's S3 output folder (stage_dataset's output_uri): KFP_RAY_OUTPUT
            while the function runs, and where a dict it returns is written as results.json
            (the jobs' format, for publish_training_results).
        delete_cluster: Delete the RayCluster once the function is over.
        lease_seconds: Length of the cluster's lease (from each renewal).
        renew_every_seconds: How often the lease is renewed.

    Returns:
        log: The driver's output.
        metrics: The numbers of the result's "metrics" (a dict result).
        result: What the function returned, as JSON.
        duration_seconds: How long the function ran.
        teardown_seconds: How long deleting the cluster took afterwards, until it was gone.
    """
    import json
    import os
    from collections import namedtuple

    import kfp_ray
    from kfp_ray.results import numeric
    from kfp_ray.tasks import drive

    # the folder the embedded code/ is in (kfp_ray may be the image's: an --image build)
    embedded_root = globals().get("__KFP_EMBEDDED_ASSET_DIR") or os.path.dirname(os.path.dirname(kfp_ray.__file__))
    value, seconds, teardown = drive(dashboard_url=dashboard_url, cluster_name=cluster_name, namespace=namespace, driver=driver,
                           function=function, kwargs=kwargs, data_uri=data_uri, log_path=log.path, embedded_root=embedded_root,
                           output_uri=output_uri, delete_cluster=delete_cluster, lease_seconds=lease_seconds,
                           renew_every_seconds=renew_every_seconds)
    log.metadata.update({"driver": driver, "function": function})
    for name, number in numeric((value.get("metrics") or {}) if isinstance(value, dict) else {}).items():
        metrics.log_metric(name, number)
    metrics.log_metric("driver_duration_seconds", seconds)
    out = namedtuple("DriverOutputs", ["result", "duration_seconds", "teardown_seconds"])
    return out(json.dumps(value, default=str), seconds, teardown)


_run_ray_driver = run_ray_driver
run_ray_driver = ray_component(packages=DRIVER)(_run_ray_driver)


def run_ray_driver_with_code(code_dir: str | Path):
    """A run_ray_driver component with `code_dir` embedded as its `code/` directory: pass
    driver="code/<file>.py" to run a file of it. The code then travels inside the compiled YAML."""
    return ray_component(packages=DRIVER, code_dir=code_dir)(_run_ray_driver)
