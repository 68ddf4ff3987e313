"""Ray Train data-parallel training (seed demo 1/2: Fashion-MNIST with a TorchTrainer).

    python fashion_mnist_train.py --workers 2 --epochs 15 [--use-gpu true]
Data from $KFP_RAY_DATA (images flattened, labels), checkpoints through Ray Train storage on
S3 ($KFP_RAY_OUTPUT/ray-results), final model and results to $KFP_RAY_OUTPUT."""

from __future__ import annotations

import argparse
import io
import os
import tempfile
import time

import storage


def whole(value: str) -> int:
    """KFP renders integer pipeline parameters in f-strings as '6.0'."""
    return int(float(value))


def make_model(n_in: int, n_out: int):
    import torch.nn as nn

    return nn.Sequential(nn.Linear(n_in, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, n_out))


def train_loop(config):
    import ray.train
    import torch
    import torch.nn as nn
    from ray.train import Checkpoint
    from ray.train.torch import prepare_data_loader, prepare_model
    from torch.utils.data import DataLoader, TensorDataset

    x, y, labels = storage.load_split(config["data_uri"], "train")
    x_te, y_te, _ = storage.load_split(config["data_uri"], "test")
    train = TensorDataset(torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.long))
    loader = prepare_data_loader(DataLoader(train, batch_size=config["batch_size"], shuffle=True))
    model = prepare_model(make_model(x.shape[1], len(labels)))
    opt = torch.optim.Adam(model.parameters(), lr=config["lr"])
    loss_fn = nn.CrossEntropyLoss()
    xt, yt = torch.tensor(x_te, dtype=torch.float32), torch.tensor(y_te, dtype=torch.long)
    for epoch in range(config["epochs"]):
        model.train()
        total, seen = 0.0, 0
        for xb, yb in loader:
            opt.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            total += float(loss) * len(yb)
            seen += len(yb)
        model.eval()
        with torch.no_grad():
            acc = float((model(xt).argmax(1) == yt).float().mean())
        metrics = {"epoch": epoch, "loss": total / max(seen, 1), "val_accuracy": acc}
        last = epoch == config["epochs"] - 1
        if ray.train.get_context().get_world_rank() == 0 and (last or epoch % 5 == 4):
            with tempfile.TemporaryDirectory() as tmp:
                state = model.module.state_dict() if hasattr(model, "module") else model.state_dict()
                torch.save(state, os.path.join(tmp, "model.pt"))
                ray.train.report(metrics, checkpoint=Checkpoint.from_directory(tmp))
        else:
            ray.train.report(metrics)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=whole, default=2)
    ap.add_argument("--epochs", type=whole, default=15)
    ap.add_argument("--batch-size", type=whole, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--use-gpu", type=lambda v: str(v).lower() in ("1", "true", "yes"), default=False,
                    help="one GPU per training worker (true on a GPU cluster)")
    args = ap.parse_args()
    data_uri, out_uri = os.environ["KFP_RAY_DATA"], os.environ["KFP_RAY_OUTPUT"]

    import ray
    import torch
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    ray.init()
    bucket, key = storage.split(out_uri)
    started = time.time()
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"data_uri": data_uri, "epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr},
        scaling_config=ScalingConfig(num_workers=args.workers, use_gpu=args.use_gpu),
        run_config=RunConfig(name="fashion-mnist", storage_path=f"{bucket}/{key}/ray-results",
                             storage_filesystem=storage.pyarrow_fs()),
    )
    result = trainer.fit()
    training_seconds = time.time() - started
    x_te, y_te, labels = storage.load_split(data_uri, "test")
    model = make_model(x_te.shape[1], len(labels))
    with result.checkpoint.as_directory() as ckpt:
        state = torch.load(os.path.join(ckpt, "model.pt"), map_location="cpu")
    model.load_state_dict(state)
    model.eval()
    xt, yt = torch.tensor(x_te, dtype=torch.float32), torch.tensor(y_te, dtype=torch.long)
    with torch.no_grad():
        logits = model(xt)
        loss = float(torch.nn.functional.cross_entropy(logits, yt))
        pred = logits.argmax(1).numpy()
    accuracy = float((pred == y_te).mean())
    buf = io.BytesIO()
    torch.save(state, buf)
    model_uri = storage.put_bytes(storage.join(out_uri, "model", "model.pt"), buf.getvalue())
    metrics = {"accuracy": accuracy, "loss": loss, "training_seconds": training_seconds, "workers": args.workers,
               "epochs": args.epochs}
    storage.put_json(storage.join(out_uri, "results.json"), {
        "framework": "pytorch", "ray_version": storage.ray_version(), "model_uri": model_uri, "model_format": "torch-state-dict",
        "model_architecture": f"MLP {x_te.shape[1]}-128-64-{len(labels)}", "metrics": metrics,
        "checkpoint_uri": f"s3://{result.checkpoint.path}" if result.checkpoint else "",
        "confusion_matrix": {"labels": labels, "matrix": storage.confusion(y_te, pred, len(labels))},
        "history": epoch_history(result.metrics_dataframe),
        "dataset": {"train": None, "test": int(len(y_te))}})
    print(f"test accuracy {accuracy:.4f}, loss {loss:.4f}, {training_seconds:.1f}s on {args.workers} workers")
    storage.report(**metrics)


def epoch_history(frame) -> dict:
    """The training curves for the report: train loss and validation accuracy per epoch, the
    best epoch by validation accuracy (results.json `history`, see README.md)."""
    if frame is None or "val_accuracy" not in frame or not len(frame):
        return {}
    acc = [float(v) for v in frame["val_accuracy"]]
    return {"steps": "epoch", "series": {"train loss": [float(v) for v in frame["loss"]], "val accuracy": acc},
            "best": acc.index(max(acc))}


if __name__ == "__main__":
    main()
