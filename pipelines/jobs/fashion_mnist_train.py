"""Ray Train data-parallel training (seed demo 1/2: Fashion-MNIST with a TorchTrainer).

    python fashion_mnist_train.py --workers 2 --epochs 15 [--use-gpu true]
Data from $KFP_RAY_DATA; a checkpoint each epoch in $KFP_RAY_CHECKPOINTS, resumed from after a
preemption; model and results to $KFP_RAY_OUTPUT."""

from __future__ import annotations

import argparse
import io
import json
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
    net = make_model(x.shape[1], len(labels))
    start, history, state = 0, {"loss": [], "val_accuracy": []}, None
    if config.get("resume"):  # the run's latest checkpoint (a preempted run, submitted again)
        state = torch.load(io.BytesIO(storage.get_bytes(config["resume"]["uri"])), map_location="cpu")
        net.load_state_dict(state["model"])
        start, history = state["epoch"] + 1, state["history"]
    model = prepare_model(net)
    opt = torch.optim.Adam(model.parameters(), lr=config["lr"])
    if state is not None:
        opt.load_state_dict(state["optimizer"])
    loss_fn = nn.CrossEntropyLoss()
    xt, yt = torch.tensor(x_te, dtype=torch.float32), torch.tensor(y_te, dtype=torch.long)
    rank0 = ray.train.get_context().get_world_rank() == 0
    epochs, every = config["epochs"], config["checkpoint_every"]
    for epoch in range(start, epochs):
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
        history["loss"].append(total / max(seen, 1))
        history["val_accuracy"].append(acc)
        metrics = {"epoch": epoch, "loss": history["loss"][-1], "val_accuracy": acc}
        weights = model.module.state_dict() if hasattr(model, "module") else model.state_dict()
        if rank0 and ((epoch + 1) % every == 0 or epoch == epochs - 1):
            buf = io.BytesIO()
            torch.save({"model": weights, "optimizer": opt.state_dict(), "epoch": epoch, "history": history}, buf)
            storage.save_checkpoint(f"epoch-{epoch:04d}.pt", buf.getvalue(), epoch=epoch)
        if rank0 and epoch == epochs - 1:
            ray.train.report(metrics, checkpoint=final_checkpoint(weights, history, Checkpoint))
        else:
            ray.train.report(metrics)
    if start >= epochs:  # preempted after its last epoch's checkpoint: nothing left to train
        metrics = {"epoch": epochs - 1, "loss": history["loss"][-1], "val_accuracy": history["val_accuracy"][-1]}
        ray.train.report(metrics, checkpoint=final_checkpoint(state["model"], history, Checkpoint) if rank0 else None)


def final_checkpoint(weights, history: dict, checkpoint_class):
    """The trained model and its whole history (every epoch, before a preemption too)."""
    import json

    import torch

    tmp = tempfile.mkdtemp()
    torch.save(weights, os.path.join(tmp, "model.pt"))
    with open(os.path.join(tmp, "history.json"), "w") as fh:
        json.dump(history, fh)
    return checkpoint_class.from_directory(tmp)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=whole, default=2)
    ap.add_argument("--epochs", type=whole, default=15)
    ap.add_argument("--batch-size", type=whole, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--use-gpu", type=lambda v: str(v).lower() in ("1", "true", "yes"), default=False,
                    help="one GPU per training worker (true on a GPU cluster)")
    ap.add_argument("--checkpoint-every", type=whole, default=1, help="epochs between checkpoints (a preemption "
                    "loses at most this many)")
    args = ap.parse_args()
    data_uri, out_uri = os.environ["KFP_RAY_DATA"], os.environ["KFP_RAY_OUTPUT"]
    resume = storage.latest_checkpoint()
    if resume:
        print(f"resuming from checkpoint {resume['uri']} (epoch {resume['epoch'] + 1} of {args.epochs} done)", flush=True)

    import ray
    import torch
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    ray.init()
    bucket, key = storage.split(out_uri)
    started = time.time()
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"data_uri": data_uri, "epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr,
                           "resume": resume, "checkpoint_every": max(1, args.checkpoint_every)},
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
        with open(os.path.join(ckpt, "history.json")) as fh:
            history = json.load(fh)
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
        "history": epoch_history(history),
        "resumed_from": {"uri": resume["uri"], "epoch": resume["epoch"]} if resume else None,
        "dataset": {"train": None, "test": int(len(y_te))}})
    print(f"test accuracy {accuracy:.4f}, loss {loss:.4f}, {training_seconds:.1f}s on {args.workers} workers")
    storage.report(**metrics)


def epoch_history(history: dict) -> dict:
    """results.json `history` (README.md): loss and accuracy per epoch, preempted ones too."""
    acc = [float(v) for v in history.get("val_accuracy") or []]
    if not acc:
        return {}
    return {"steps": "epoch", "series": {"train loss": [float(v) for v in history["loss"]], "val accuracy": acc},
            "best": acc.index(max(acc))}


if __name__ == "__main__":
    main()
