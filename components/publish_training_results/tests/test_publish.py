"""publish_training_results' runtime: the report a user reads."""

from __future__ import annotations

from kfp_ray import results


def test_report_lists_metrics_locations_best_trial_and_confusion_matrix():
    data = {"framework": "xgboost", "model_uri": "s3://b/r/model/model.json", "trials_uri": "s3://b/r/trials.csv",
            "checkpoint_uri": "b/r/ray-results/x/checkpoint_000000", "metrics": {"accuracy": 0.9561, "trials": 6},
            "best_config": {"max_depth": 4}, "confusion_matrix": {"labels": ["malignant", "benign"], "matrix": [[40, 2], [3, 69]]}}
    md = results.markdown(data, "s3://b/r/results.json", "run-7")
    assert md.startswith("# Training run run-7")
    assert "| accuracy | 0.9561 |" in md and "| trials | 6 |" in md
    assert "- model: `s3://b/r/model/model.json`" in md and "- trial table: `s3://b/r/trials.csv`" in md
    assert '"max_depth": 4' in md
    assert "| **malignant** | 40 | 2 |" in md and "| **benign** | 3 | 69 |" in md
