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
