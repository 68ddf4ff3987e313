"""S3 access for Ray jobs, from the data connection env on the Ray pods (MinIO-friendly)."""

from __future__ import annotations

import io
import json
import os
from urllib.parse import urlparse

# Load torch (when installed) before pyarrow's S3 client, xgboost's OpenMP and ray.init()
# take the process's static TLS: Ray Train/Tune import torch lazily when it is present,
# and loading it late fails ("Intel oneMKL FATAL ERROR: Cannot load libtorch_cpu.so",
# then a segfault), seen with ray 2.52.1 + torch 2.13.0 in a job driver.
try:
    import torch  # noqa: F401
except ImportError:
    pass


def client():
    import boto3
    from botocore.config import Config

    endpoint = os.environ["AWS_S3_ENDPOINT"]
    if "://" not in endpoint:
        endpoint = "https://" + endpoint
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
                        region_name=os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
                        config=Config(s3={"addressing_style": "path"}))


def split(uri: str) -> tuple[str, str]:
    p = urlparse(uri)
    return p.netloc, p.path.lstrip("/")


def join(uri: str, *parts: str) -> str:
    return "/".join([uri.rstrip("/"), *parts])


def put_bytes(uri: str, data: bytes) -> str:
    bucket, key = split(uri)
    client().put_object(Bucket=bucket, Key=key, Body=data)
    return uri


def get_bytes(uri: str) -> bytes:
    bucket, key = split(uri)
    return client().get_object(Bucket=bucket, Key=key)["Body"].read()


def put_json(uri: str, obj) -> str:
    return put_bytes(uri, json.dumps(obj, indent=2, sort_keys=True).encode())


def ray_version() -> str:
    """The Ray the job ran on (results.json `ray_version`, for the run report)."""
    import ray

    return ray.__version__


def load_split(data_uri: str, name: str):
    import numpy as np

    with np.load(io.BytesIO(get_bytes(join(data_uri, f"{name}.npz"))), allow_pickle=False) as z:
        return z["x"], z["y"], [str(v) for v in z["labels"]]


def pyarrow_fs():
    """A pyarrow S3 filesystem on the data connection, for Ray Train/Tune storage_path."""
    from pyarrow import fs

    endpoint = urlparse(os.environ["AWS_S3_ENDPOINT"] if "://" in os.environ["AWS_S3_ENDPOINT"]
                        else "https://" + os.environ["AWS_S3_ENDPOINT"])
    return fs.S3FileSystem(access_key=os.environ["AWS_ACCESS_KEY_ID"], secret_key=os.environ["AWS_SECRET_ACCESS_KEY"],
                           endpoint_override=endpoint.netloc, scheme=endpoint.scheme,
                           region=os.environ.get("AWS_DEFAULT_REGION") or "us-east-1", force_virtual_addressing=False)


def confusion(y_true, y_pred, n: int) -> list[list[int]]:
    m = [[0] * n for _ in range(n)]
    for t, p in zip(y_true, y_pred, strict=True):
        m[int(t)][int(p)] += 1
    return m


def report(**metrics) -> None:
    """The kfp-ray metrics contract: one line follow_ray_job parses."""
    print("KFP_RAY_METRICS " + json.dumps({k: float(v) for k, v in metrics.items()}), flush=True)


# --- checkpoints: where a preempted run resumes from (docs/usage.md, "When Kueue preempts")
def checkpoints_uri() -> str:
    """$KFP_RAY_CHECKPOINTS: the run's checkpoint folder, the same for each submission of the job."""
    return os.environ.get("KFP_RAY_CHECKPOINTS") or join(os.environ["KFP_RAY_OUTPUT"], "checkpoints")


def save_checkpoint(name: str, data: bytes, **facts) -> str:
    """The checkpoint, then latest.json naming it, then a `KFP_RAY_CHECKPOINT <uri>` line."""
    uri = put_bytes(join(checkpoints_uri(), name), data)
    put_json(join(checkpoints_uri(), "latest.json"), {"uri": uri, **facts})
    print(f"KFP_RAY_CHECKPOINT {uri}", flush=True)
    return uri


def latest_checkpoint() -> dict | None:
    """latest.json ({"uri": ..., facts}), or None before the first checkpoint."""
    from botocore.exceptions import ClientError

    try:
        return json.loads(get_bytes(join(checkpoints_uri(), "latest.json")))
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            return None
        raise
