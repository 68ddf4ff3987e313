"""Stage a training dataset in S3 as train.npz / test.npz (x, y, labels), held-out split
stratified and seeded. Small datasets ship with scikit-learn (no download); Fashion-MNIST
is fetched from its source files (on a cluster with internet access)."""

from __future__ import annotations

import gzip
import io
import urllib.request

from . import s3
from .errors import InputError
from .wait import log, retry

FASHION_URL = "https://github.com/zalandoresearch/fashion-mnist/raw/master/data/fashion/{}"
FASHION_LABELS = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
DATASETS = ("digits", "breast_cancer", "fashion_mnist")


def _sklearn(name: str):
    from sklearn import datasets

    ds = datasets.load_digits() if name == "digits" else datasets.load_breast_cancer()
    labels = [str(v) for v in ds.target_names]
    x = ds.data.astype("float32")
    if name == "digits":
        x = x / 16.0
    return x, ds.target.astype("int64"), labels


def _fashion(base_url: str):
    import numpy as np

    def fetch(name, offset):
        def get():
            with urllib.request.urlopen(base_url.format(name), timeout=60) as r:
                return r.read()
        return np.frombuffer(gzip.decompress(retry(get, f"download {name}")), dtype=np.uint8, offset=offset)

    x = np.concatenate([fetch("train-images-idx3-ubyte.gz", 16), fetch("t10k-images-idx3-ubyte.gz", 16)])
    y = np.concatenate([fetch("train-labels-idx1-ubyte.gz", 8), fetch("t10k-labels-idx1-ubyte.gz", 8)])
    return (x.reshape(-1, 784) / 255.0).astype("float32"), y.astype("int64"), FASHION_LABELS


def stage(dataset: str, data_uri: str, test_fraction: float = 0.2, seed: int = 0,
          fashion_url: str = FASHION_URL) -> dict:
    """Stage `dataset` under data_uri; "" or "none" stages nothing (the job brings its data)."""
    if dataset in ("", "none"):
        log(f"no dataset to stage; the job's data and outputs go under {data_uri.rsplit('/', 1)[0]}")
        return {"train": 0, "test": 0, "features": 0, "classes": 0}
    if dataset not in DATASETS:
        raise InputError("dataset", f"{dataset!r} is not known", f"use one of {', '.join(DATASETS)}, or '' for none")
    if not 0 < test_fraction < 1:
        raise InputError("test_fraction", f"{test_fraction!r} is not between 0 and 1", "give e.g. 0.2")
    client = s3.client()
    bucket, prefix = s3.split(data_uri.rstrip("/") + "/")
    s3.check_bucket(client, bucket)  # before the 2 s of numpy and scikit-learn imports
    import numpy as np
    from sklearn.model_selection import train_test_split

    x, y, labels = _fashion(fashion_url) if dataset == "fashion_mnist" else _sklearn(dataset)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=test_fraction, random_state=seed, stratify=y)
    for name, xs, ys in (("train", x_tr, y_tr), ("test", x_te, y_te)):
        buf = io.BytesIO()
        np.savez_compressed(buf, x=xs, y=ys, labels=np.array(labels))
        retry(lambda b=buf.getvalue(), n=name: client.put_object(Bucket=bucket, Key=f"{prefix}{n}.npz", Body=b),
              f"upload {name}.npz")
    log(f"staged {dataset}: {len(y_tr)} train / {len(y_te)} test rows, {x.shape[1]} features, "
        f"{len(labels)} classes at {data_uri}")
    return {"train": int(len(y_tr)), "test": int(len(y_te)), "features": int(x.shape[1]), "classes": len(labels)}


LIFECYCLES = ("raycluster", "rayjob")


def check_lifecycle(lifecycle: str) -> None:
    """The training pipelines' `lifecycle` parameter (pipelines/common.py): their first task
    checks it, so that a typo fails the run instead of picking a mode."""
    if lifecycle not in LIFECYCLES:
        raise InputError("lifecycle", f"{lifecycle!r} is not a lifecycle",
                         'give "raycluster" (kfp-ray provisions and deletes a RayCluster) or "rayjob" (a KubeRay RayJob '
                         "creates and deletes its own cluster)")


def run_prefix(run_id: str, s3_prefix: str = "") -> str:
    """s3://<bucket>/<prefix> for this run: the data connection's bucket, and s3_prefix
    (default runs/<run id>)."""
    import os

    from .validate import Checker

    c = Checker()
    c.s3_prefix("s3_prefix", s3_prefix)
    if not s3_prefix:
        c.not_empty("run_id", run_id, "pass dsl.PIPELINE_JOB_ID_PLACEHOLDER as run_id, or give s3_prefix")
    c.done()
    bucket = os.environ.get("AWS_S3_BUCKET")
    if not bucket:
        raise InputError("data_connection", "the task has no AWS_S3_BUCKET", "use a data connection that names a bucket")
    prefix = (s3_prefix or f"runs/{run_id}").strip("/")
    return f"s3://{bucket}/{prefix}"
