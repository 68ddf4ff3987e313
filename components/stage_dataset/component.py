from typing import NamedTuple

from kfp_ray.components._build import DATA, ray_component


@ray_component(packages=DATA)
def stage_dataset(
    dataset: str,
    run_id: str,
    s3_prefix: str = "",
    test_fraction: float = 0.2,
    seed: int = 0,
    lifecycle: str = "raycluster",
) -> NamedTuple("StageOutputs", [("data_uri", str), ("output_uri", str), ("train_rows", int), ("test_rows", int)]):
    """Stage a training dataset in S3 (the data connection's bucket) for a Ray job.

    Writes train.npz and test.npz (x, y, labels) with a stratified, seeded held-out split.
    "digits" and "breast_cancer" ship with scikit-learn (no download); "fashion_mnist" is
    fetched from the dataset's source files (needs internet access). Mount the data
    connection secret as env (kfp-kubernetes use_secret_as_env).

    Args:
        dataset: digits, breast_cancer or fashion_mnist.
        run_id: The pipeline run's id (dsl.PIPELINE_JOB_ID_PLACEHOLDER).
        s3_prefix: Key prefix for this run's data and results; empty: runs/<run id>.
        test_fraction: Share of rows held out for testing.
        seed: Seed of the split.
        lifecycle: The training pipeline's `lifecycle` parameter, checked here, the first
            task of every run: "raycluster" or "rayjob".

    Returns:
        data_uri: s3:// folder with train.npz and test.npz (give the job KFP_RAY_DATA).
        output_uri: s3:// folder for the job's model and results (KFP_RAY_OUTPUT).
        train_rows: Rows for training.
        test_rows: Rows held out.
    """
    from collections import namedtuple

    from kfp_ray.datasets import check_lifecycle, run_prefix, stage

    check_lifecycle(lifecycle)
    out = run_prefix(run_id, s3_prefix)
    counts = stage(dataset, out + "/data", test_fraction=test_fraction, seed=seed)
    result = namedtuple("StageOutputs", ["data_uri", "output_uri", "train_rows", "test_rows"])
    return result(out + "/data", out, counts["train"], counts["test"])
