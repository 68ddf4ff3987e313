"""Ray Tune over XGBoost hyperparameters (seed demo 3): several concurrent trials inside
one Kueue-admitted RayCluster (Kueue admits the cluster, Ray schedules the trials in it).

    python xgboost_tune.py --samples 6 --concurrent 3
Data from $KFP_RAY_DATA, results to $KFP_RAY_OUTPUT (see README.md); Tune's experiment state in
$KFP_RAY_CHECKPOINTS, restored when a preempted run is submitted again."""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import storage


def whole(value: str) -> int:
    """KFP renders integer pipeline parameters in f-strings as '6.0'."""
    return int(float(value))


def train_xgb(config, data):
    import xgboost as xgb
    from ray import tune

    x_tr, y_tr, x_va, y_va = data
    dtrain, dval = xgb.DMatrix(x_tr, label=y_tr), xgb.DMatrix(x_va, label=y_va)
    params = {"objective": "binary:logistic", "eval_metric": ["logloss", "error"], "nthread": 1,
              "max_depth": config["max_depth"], "eta": config["eta"], "subsample": config["subsample"],
              "min_child_weight": config["min_child_weight"]}
    evals = {}
    booster = xgb.train(params, dtrain, num_boost_round=config["rounds"], evals=[(dval, "val")], evals_result=evals,
                        verbose_eval=False)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.json")
        booster.save_model(path)
        from ray.tune import Checkpoint

        tune.report({"val_logloss": evals["val"]["logloss"][-1], "val_accuracy": 1.0 - evals["val"]["error"][-1]},
                    checkpoint=Checkpoint.from_directory(tmp))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=whole, default=6)
    ap.add_argument("--concurrent", type=whole, default=3)
    ap.add_argument("--rounds", type=whole, default=60)
    args = ap.parse_args()
    data_uri, out_uri = os.environ["KFP_RAY_DATA"], os.environ["KFP_RAY_OUTPUT"]

    import numpy as np
    import ray
    import xgboost as xgb
    from ray import tune

    ray.init()
    x, y, labels = storage.load_split(data_uri, "train")
    x_te, y_te, _ = storage.load_split(data_uri, "test")
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(y))
    cut = int(len(y) * 0.8)
    data = (x[idx[:cut]], y[idx[:cut]], x[idx[cut:]], y[idx[cut:]])
    space = {"max_depth": tune.randint(2, 7), "eta": tune.loguniform(0.02, 0.4), "subsample": tune.uniform(0.6, 1.0),
             "min_child_weight": tune.choice([1, 2, 4]), "rounds": args.rounds}
    started = time.time()
    trainable = tune.with_resources(tune.with_parameters(train_xgb, data=data), {"cpu": 1})
    # Tune keeps the experiment's state in the run's checkpoint folder: a run submitted again
    # after a Kueue preemption restores it, keeps the finished trials and runs the rest again.
    fs, where = storage.pyarrow_fs(), "/".join(storage.split(storage.checkpoints_uri())).rstrip("/")
    experiment = f"{where}/xgboost-tune"
    if tune.Tuner.can_restore(experiment, storage_filesystem=fs):
        print(f"resuming from checkpoint s3://{experiment} (Ray Tune's experiment state: finished trials kept, "
              "the others run again)", flush=True)
        tuner = tune.Tuner.restore(experiment, trainable, resume_unfinished=True, resume_errored=True,
                                   param_space=space, storage_filesystem=fs)
    else:
        tuner = tune.Tuner(
            trainable, param_space=space,
            tune_config=tune.TuneConfig(metric="val_logloss", mode="min", num_samples=args.samples,
                                        max_concurrent_trials=args.concurrent),
            run_config=tune.RunConfig(name="xgboost-tune", storage_path=where, storage_filesystem=fs),
        )
    results = tuner.fit()
    tuning_seconds = time.time() - started
    best = results.get_best_result()
    with best.checkpoint.as_directory() as ckpt:
        booster = xgb.Booster()
        booster.load_model(os.path.join(ckpt, "model.json"))
        model_bytes = open(os.path.join(ckpt, "model.json"), "rb").read()
    prob = booster.predict(xgb.DMatrix(x_te))
    pred = (prob > 0.5).astype(int)
    accuracy = float((pred == y_te).mean())
    logloss = float(-np.mean(y_te * np.log(np.clip(prob, 1e-7, 1)) + (1 - y_te) * np.log(np.clip(1 - prob, 1e-7, 1))))
    table = results.get_dataframe()
    keep = [c for c in table.columns if c.startswith("config/") or c in ("trial_id", "val_logloss", "val_accuracy", "time_total_s")]
    trials_uri = storage.put_bytes(storage.join(out_uri, "trials.csv"), table[keep].to_csv(index=False).encode())
    model_uri = storage.put_bytes(storage.join(out_uri, "model", "model.json"), model_bytes)
    metrics = {"accuracy": accuracy, "loss": logloss, "training_seconds": tuning_seconds, "trials": len(table),
               "best_val_logloss": best.metrics["val_logloss"]}
    storage.put_json(storage.join(out_uri, "results.json"), {
        "framework": "xgboost", "ray_version": storage.ray_version(), "model_uri": model_uri, "model_format": "xgboost-json", "metrics": metrics,
        "best_config": {k: v for k, v in best.config.items()}, "trials_uri": trials_uri,
        "checkpoint_uri": best.checkpoint.path if best.checkpoint else "",
        "confusion_matrix": {"labels": labels, "matrix": storage.confusion(y_te, pred, len(labels))},
        "history": trial_history(table, best.metrics.get("trial_id")),
        "dataset": {"train": int(len(y)), "test": int(len(y_te))}})
    print(f"best trial {best.config} val_logloss {best.metrics['val_logloss']:.4f}; test accuracy {accuracy:.4f}")
    storage.report(**metrics)


def trial_history(table, best_trial) -> dict:
    """The report's curves for a tuning run: each trial's validation logloss and accuracy, the
    best trial marked (results.json `history`, see README.md)."""
    if table is None or "val_logloss" not in table or not len(table):
        return {}
    ids = list(table["trial_id"]) if "trial_id" in table else []
    series = {"val logloss": [float(v) for v in table["val_logloss"]]}
    if "val_accuracy" in table:
        series["val accuracy"] = [float(v) for v in table["val_accuracy"]]
    return {"steps": "trial", "series": series, "best": ids.index(best_trial) if best_trial in ids else None}


if __name__ == "__main__":
    main()
