"""The driver's code from S3 (read with the data connection), as a job's working_dir may be."""

from __future__ import annotations

import pytest

from kfp_ray.driver import DriverError, load_function


def test_a_driver_in_s3_is_read_with_the_data_connection(sbx, monkeypatch):
    for k, v in sbx.data_connection().items():
        monkeypatch.setenv(k, v)
    sbx.s3().put_object(Bucket="kfp-ray", Key="drivers/train.py", Body=b"def main(a, b=2):\n    return {'sum': a + b}\n")
    assert load_function("s3://kfp-ray/drivers/train.py", "main")(a=1) == {"sum": 3}
    with pytest.raises(DriverError, match="has no function 'train'"):
        load_function("s3://kfp-ray/drivers/train.py", "train")
    with pytest.raises(DriverError, match=r"driver: could not read s3://kfp-ray/drivers/missing.py \(NoSuchKey"):
        load_function("s3://kfp-ray/drivers/missing.py", "main")
