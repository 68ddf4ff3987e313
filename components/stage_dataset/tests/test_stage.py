"""stage_dataset's runtime against the sandbox's S3."""

from __future__ import annotations

import io

import numpy as np
import pytest

from kfp_ray import datasets
from kfp_ray.errors import InputError


def test_stages_a_stratified_split_that_jobs_can_read(sbx, monkeypatch):
    for k, v in sbx.data_connection().items():
        monkeypatch.setenv(k, v)
    prefix = datasets.run_prefix("r-stage")
    assert prefix == "s3://kfp-ray/runs/r-stage"
    counts = datasets.stage("digits", prefix + "/data", test_fraction=0.25, seed=1)
    assert counts == {"train": 1347, "test": 450, "features": 64, "classes": 10}
    body = sbx.s3().get_object(Bucket="kfp-ray", Key="runs/r-stage/data/test.npz")["Body"].read()
    with np.load(io.BytesIO(body)) as z:
        assert z["x"].shape == (450, 64) and z["x"].max() <= 1.0
        assert sorted(set(z["y"].tolist())) == list(range(10)) and list(z["labels"]) == [str(i) for i in range(10)]


def test_unknown_dataset_and_bad_split_name_the_field(sbx, monkeypatch):
    for k, v in sbx.data_connection().items():
        monkeypatch.setenv(k, v)
    with pytest.raises(InputError, match="use one of digits, breast_cancer, fashion_mnist"):
        datasets.stage("imagenet", "s3://kfp-ray/x")
    with pytest.raises(InputError) as exc:
        datasets.stage("digits", "s3://kfp-ray/x", test_fraction=1.5)
    assert exc.value.field == "test_fraction"


def test_a_data_connection_without_a_region_stages_with_boto3s_default(sbx, monkeypatch):
    """RHOAI data connections may lack AWS_DEFAULT_REGION: the task gets no region
    (pipelines.common mounts it optional) and the runtime gives boto3 us-east-1."""
    from kfp_ray.pipelines.common import data_connection_env

    env = data_connection_env({k: v for k, v in sbx.data_connection().items() if k != "AWS_DEFAULT_REGION"})
    assert "AWS_DEFAULT_REGION" not in env
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.delenv("AWS_REGION", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    counts = datasets.stage("breast_cancer", datasets.run_prefix("r-noregion") + "/data")
    assert counts["train"] + counts["test"] == 569
    assert sbx.s3().head_object(Bucket="kfp-ray", Key="runs/r-noregion/data/train.npz")["ContentLength"] > 0


def test_a_wrong_bucket_or_key_fails_at_once_naming_the_data_connection(sbx, monkeypatch):
    """The bucket is checked with one request before the data is made (seconds of imports)."""
    for k, v in sbx.data_connection().items():
        monkeypatch.setenv(k, v)
    with pytest.raises(InputError, match="bucket 'no-such-bucket' is not usable") as exc:
        datasets.stage("digits", "s3://no-such-bucket/x/data")
    assert exc.value.field == "data_connection"
