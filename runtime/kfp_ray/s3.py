"""S3-compatible storage through an RHOAI data connection (MinIO: path-style, plain http).

Credentials, endpoint, bucket and region come from the data connection's keys, which
kfp-kubernetes `use_secret_as_env` puts into the task's environment."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from .errors import InputError
from .wait import retry

KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_S3_ENDPOINT", "AWS_S3_BUCKET", "AWS_DEFAULT_REGION")
PUBLIC_KEYS = ("AWS_S3_ENDPOINT", "AWS_S3_BUCKET", "AWS_DEFAULT_REGION")


def connection_env(env=os.environ) -> dict[str, str]:
    return {k: env[k] for k in KEYS if env.get(k)}


def client(env=os.environ, timeout: float = 60, attempts: int = 5):
    """A boto3 S3 client of the data connection: `timeout` per connect and read, `attempts`
    per request (botocore's standard retries)."""
    missing = [k for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_S3_ENDPOINT") if not env.get(k)]
    if missing:
        raise InputError("data_connection", f"the task has no {', '.join(missing)} in its environment",
                         "mount the data connection secret into the task (kfp-kubernetes use_secret_as_env)")
    import boto3
    from botocore.config import Config

    endpoint = env["AWS_S3_ENDPOINT"]
    if "://" not in endpoint:
        endpoint = "https://" + endpoint
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name=env.get("AWS_DEFAULT_REGION") or "us-east-1",
                        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": attempts, "mode": "standard"},
                                      connect_timeout=timeout, read_timeout=timeout))


def check_bucket(s3, bucket: str) -> None:
    """One request that the data connection reaches its bucket: a wrong endpoint, keys or
    bucket fails here, before a task spends seconds on imports and data."""
    from .wait import retry

    try:
        retry(lambda: s3.head_bucket(Bucket=bucket), f"reach bucket {bucket}")
    except Exception as exc:  # noqa: BLE001 - transient ones were retried; what is left is the answer
        error = getattr(exc, "response", None)
        code = error.get("Error", {}).get("Code", "") if isinstance(error, dict) else type(exc).__name__
        raise InputError("data_connection", f"bucket {bucket!r} is not usable at {s3.meta.endpoint_url} ({code})",
                         "check the data connection's endpoint, keys and bucket (AWS_S3_*)") from None


def split(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise InputError("uri", f"{uri!r} is not an s3:// URI", "give s3://<bucket>/<key>")
    return parsed.netloc, parsed.path.lstrip("/")


def not_found(exc: Exception) -> bool:
    """S3's answer for a key that is not there: boto3's ClientError NoSuchKey (get_object) or
    404 (head_object, download_file)."""
    error = getattr(exc, "response", None)
    code = error.get("Error", {}).get("Code", "") if isinstance(error, dict) else ""
    return code in ("NoSuchKey", "404", "NotFound") or "404" in str(exc) or "Not Found" in str(exc)


def download(uri: str, dest: Path, s3=None) -> Path:
    """Download an object (to dest/<basename>) or every object under a prefix (into dest)."""
    s3 = s3 or client()
    bucket, key = split(uri)
    dest.mkdir(parents=True, exist_ok=True)
    if key and not key.endswith("/"):
        try:
            target = dest / Path(key).name
            retry(lambda: s3.download_file(bucket, key, str(target)), f"download {uri}")
            return target
        except Exception as exc:  # noqa: BLE001 - a prefix without the trailing slash
            if not not_found(exc):
                raise
            key += "/"
    found = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key):
        for obj in page.get("Contents", []):
            rel = obj["Key"][len(key):]
            if not rel or rel.endswith("/"):
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            retry(lambda o=obj, t=target: s3.download_file(bucket, o["Key"], str(t)), f"download s3://{bucket}/{obj['Key']}")
            found += 1
    if not found:
        raise InputError("working_dir", f"nothing found at {uri}", "check the bucket and prefix")
    return dest
