from pathlib import Path
from typing import NamedTuple

from kfp_ray.components._build import SUBMIT, ray_component


def submit_ray_job(
    dashboard_url: str,
    entrypoint: str,
    run_id: str,
    task_name: str = "submit-ray-job",
    working_dir: str = "",
    pip: list = [],
    env_vars: dict = {},
    metadata: dict = {},
    requirements_file: str = "",
    install_requirements: bool = True,
    cluster_name: str = "",
    namespace: str = "",
) -> NamedTuple("SubmitOutputs", [("job_id", str)]):
    """Submit a Ray job to a RayCluster through its dashboard's Job Submission API.

    The submission id comes from the run and task, so a retried task finds the job it
    already submitted instead of starting a second one. Turn caching off for this task.

    Args:
        dashboard_url: provision_ray_cluster's dashboard_url output.
        entrypoint: The command the job runs, e.g. "python train.py --epochs 5".
        run_id: The pipeline run's id (dsl.PIPELINE_JOB_ID_PLACEHOLDER).
        task_name: The task's name (dsl.PIPELINE_TASK_NAME_PLACEHOLDER); part of the submission id.
        working_dir: The job's code: a directory embedded in this component ("code" for
            components made by submit_ray_job_with_code), an s3:// URI (prefix or .zip, read
            with the data connection) or an https:// zip URL. Empty: no code upload.
        pip: pip requirements installed for the job on every Ray node (Ray runtime_env
            pip), after requirements_file's, e.g. ["xgboost==3.2.0"].
        env_vars: Environment variables for the job.
        metadata: Ray job metadata (run id and task are added).
        requirements_file: A pip requirements file in the embedded working_dir, e.g.
            "requirements/train.txt": its lines go first into runtime_env pip.
        install_requirements: False leaves requirements_file out, for a Ray image that
            already has them (pip is still installed).
        cluster_name: provision_ray_cluster's cluster_name: its lease is kept alive from
            provision to follow (handed on as this task starts and ends). Empty: not renewed.
        namespace: provision_ray_cluster's namespace (empty: the pipeline's own).

    Returns:
        job_id: The Ray job (submission) id.
    """
    import os
    from collections import namedtuple

    import kfp_ray
    from kfp_ray.tasks import submit

    # the folder the embedded code/ is in (kfp_ray may be the image's: an --image build)
    embedded_root = globals().get("__KFP_EMBEDDED_ASSET_DIR") or os.path.dirname(os.path.dirname(kfp_ray.__file__))
    job_id = submit(dashboard_url=dashboard_url, entrypoint=entrypoint, run_id=run_id, task=task_name,
                  working_dir=working_dir, embedded_root=embedded_root, pip=pip, env_vars=env_vars, metadata=metadata,
                  requirements_file=requirements_file if install_requirements else "", cluster_name=cluster_name,
                  namespace=namespace)
    return namedtuple("SubmitOutputs", ["job_id"])(job_id)


_submit_ray_job = submit_ray_job
submit_ray_job = ray_component(packages=SUBMIT)(_submit_ray_job)


def submit_ray_job_with_code(code_dir: str | Path, files=None):
    """A submit_ray_job component with `code_dir` embedded as its `code/` directory: pass
    working_dir="code" to run it. The job's code then travels inside the compiled YAML.
    `files`: only these paths of code_dir (relative to it); default all."""
    return ray_component(packages=SUBMIT, code_dir=code_dir, code_files=files)(_submit_ray_job)
