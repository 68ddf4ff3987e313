"""Seed demo 2 as a pipeline step: Ray Train driven from a Ray client, checkpoints in S3.

run_ray_driver calls train() after ray.init("ray://..."): this process is the driver (the
pipeline task), the training runs on the RayCluster. Only numpy and pyarrow on the cluster
(both in the RHOAI Ray image): a softmax regression trained data-parallel by num_workers Ray
Train workers, each on its shard, their weights averaged after every epoch through an actor.
Rank 0 reports each epoch's metrics with a checkpoint (the weights), which Ray Train writes to
storage_path in S3 (the data connection's bucket, through a pyarrow S3 filesystem).

Returns the jobs' results.json (pipelines/jobs/README.md): metrics, per-epoch history with the
best epoch, confusion matrix, model and checkpoint locations.
"""

from __future__ import annotations

import io
import os
from urllib.parse import urlparse


def _s3_fs():
    """The data connection (this task's env) as a pyarrow S3 filesystem for Ray Train."""
    from pyarrow import fs

    raw = os.environ["AWS_S3_ENDPOINT"]
    endpoint = urlparse(raw if "://" in raw else "https://" + raw)
    return fs.S3FileSystem(access_key=os.environ["AWS_ACCESS_KEY_ID"], secret_key=os.environ["AWS_SECRET_ACCESS_KEY"],
                           endpoint_override=endpoint.netloc, scheme=endpoint.scheme,
                           region=os.environ.get("AWS_DEFAULT_REGION") or "us-east-1", force_virtual_addressing=False)


def _load(fs, uri: str):
    import numpy as np

    with fs.open_input_file(uri.removeprefix("s3://")) as fh, np.load(io.BytesIO(fh.read()), allow_pickle=False) as z:
        return z["x"].astype("float64"), z["y"].astype("int64"), [str(v) for v in z["labels"]]


def _loop(config: dict) -> None:
    """One Ray Train worker: SGD on its shard, weights averaged with the others each epoch."""
    import tempfile

    import numpy as np
    import ray
    import ray.train as train

    ctx = train.get_context()
    rank, size = ctx.get_world_rank(), ctx.get_world_size()
    x, y = config["x"][rank::size], config["y"][rank::size]
    xt, yt = config["x_test"], config["y_test"]
    classes, lr = config["classes"], config["lr"]
    w = np.zeros((x.shape[1] + 1, classes))

    def logits(a, w):
        return np.hstack([a, np.ones((len(a), 1))]) @ w

    def softmax(z):
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)

    for epoch in range(config["epochs"]):
        order = np.random.default_rng(epoch * size + rank).permutation(len(x))
        for start in range(0, len(x), 32):
            b = order[start:start + 32]
            p = softmax(logits(x[b], w))
            p[np.arange(len(b)), y[b]] -= 1
            w = w - lr * np.hstack([x[b], np.ones((len(b), 1))]).T @ p / len(b)
        w = ray.get(config["averager"].average.remote(epoch, w))
        p = softmax(logits(x, w))
        loss = float(-np.log(p[np.arange(len(y)), y] + 1e-12).mean())
        acc = float((softmax(logits(xt, w)).argmax(axis=1) == yt).mean())
        metrics = {"epoch": epoch + 1, "train_loss": loss, "test_accuracy": acc}
        if rank == 0:
            with tempfile.TemporaryDirectory() as d:
                np.save(os.path.join(d, "weights.npy"), w)
                train.report(metrics, checkpoint=train.Checkpoint.from_directory(d))
        else:
            train.report(metrics)


def train(epochs: int = 8, num_workers: int = 2, learning_rate: float = 0.5) -> dict:
    """KFP_RAY_DATA: the staged dataset (train.npz, test.npz); KFP_RAY_OUTPUT: the run's folder.
    (Numbers may come as 8.0: KFP passes pipeline parameters as JSON numbers.)"""
    epochs, num_workers, learning_rate = int(epochs), int(num_workers), float(learning_rate)
    import ray
    from ray.train import CheckpointConfig, RunConfig, ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    @ray.remote(num_cpus=0)
    class Averager:
        """Averages the workers' weights of an epoch once all of them sent theirs."""

        def __init__(self, n: int):
            self.n, self.sums, self.counts, self.events = n, {}, {}, {}

        async def average(self, epoch: int, w):
            import asyncio

            event = self.events.setdefault(epoch, asyncio.Event())
            self.sums[epoch] = self.sums.get(epoch, 0) + w
            self.counts[epoch] = self.counts.get(epoch, 0) + 1
            if self.counts[epoch] == self.n:
                event.set()
            await event.wait()
            return self.sums[epoch] / self.n

    import numpy as np

    fs = _s3_fs()
    data_uri = os.environ["KFP_RAY_DATA"]
    x, y, labels = _load(fs, data_uri.rstrip("/") + "/train.npz")
    xt, yt, _ = _load(fs, data_uri.rstrip("/") + "/test.npz")
    scale = np.abs(x).max(axis=0)
    scale[scale == 0] = 1.0
    x, xt = x / scale, xt / scale
    print(f"training on {len(x)} examples ({len(labels)} classes), testing on {len(xt)}; "
          f"{num_workers} Ray Train workers, {epochs} epochs", flush=True)
    storage = os.environ["KFP_RAY_OUTPUT"].rstrip("/") + "/checkpoints"
    trainer = DataParallelTrainer(
        _loop,
        train_loop_config={"x": x, "y": y, "x_test": xt, "y_test": yt, "classes": len(labels), "epochs": epochs,
                           "lr": learning_rate, "averager": Averager.remote(num_workers)},
        scaling_config=ScalingConfig(num_workers=num_workers),
        run_config=RunConfig(name="interactive_train", storage_path=storage.removeprefix("s3://"), storage_filesystem=fs,
                             checkpoint_config=CheckpointConfig(checkpoint_score_attribute="test_accuracy",
                                                                checkpoint_score_order="max")))
    result = trainer.fit()
    history = sorted((m for _, m in result.best_checkpoints), key=lambda m: m["epoch"])
    best_ckpt, best = max(result.best_checkpoints, key=lambda cm: (cm[1]["test_accuracy"], -cm[1]["epoch"]))
    with fs.open_input_file(best_ckpt.path + "/weights.npy") as fh:
        w = np.load(io.BytesIO(fh.read()), allow_pickle=False)
    pred = (np.hstack([xt, np.ones((len(xt), 1))]) @ w).argmax(axis=1)
    matrix = [[int(((yt == t) & (pred == p)).sum()) for p in range(len(labels))] for t in range(len(labels))]
    print(f"best epoch {best['epoch']}: test accuracy {best['test_accuracy']:.3f}", flush=True)
    return {
        "metrics": {"accuracy": best["test_accuracy"], "train_loss": best["train_loss"], "epochs": epochs,
                    "checkpoints": len(history)},
        "history": {"steps": "epoch", "best": history.index(best),
                    "series": {"train_loss": [m["train_loss"] for m in history],
                               "test_accuracy": [m["test_accuracy"] for m in history]}},
        "confusion_matrix": {"labels": labels, "matrix": matrix},
        "best_config": {"learning_rate": learning_rate, "num_workers": num_workers, "best_epoch": best["epoch"]},
        "model_uri": "s3://" + best_ckpt.path + "/weights.npy",
        "checkpoint_uri": "s3://" + result.path,
    }
