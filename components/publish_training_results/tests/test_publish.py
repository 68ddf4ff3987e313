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


def test_a_job_without_results_gets_a_report_of_what_it_printed_and_where_its_outputs_are():
    md = results.markdown_without_results("s3://b/runs/r1/", "s3://b/runs/r1/results.json", "run-8",
                                          {"loss": 0.25, "epochs": 3, "job_duration_seconds": 12.5},
                                          "epoch 3 loss 0.25\n```fenced```")
    assert md.startswith("# Training run run-8") and "wrote no `results.json`" in md
    assert "| loss | 0.25 |" in md and "| epochs | 3 |" in md
    assert "- output location: `s3://b/runs/r1/`" in md
    assert "~~~~\nepoch 3 loss 0.25\n```fenced```\n~~~~" in md  # the log cannot close its own fence
    assert "printed no `KFP_RAY_METRICS`" in results.markdown_without_results("s3://b/r", "s3://b/r/results.json",
                                                                              "x", {}, "")


def test_only_a_missing_key_means_no_results():
    from botocore.exceptions import ClientError

    from kfp_ray import s3

    def error(code):
        return ClientError({"Error": {"Code": code, "Message": code}}, "GetObject")

    assert s3.not_found(error("NoSuchKey")) and s3.not_found(error("404"))
    assert not s3.not_found(error("AccessDenied")) and not s3.not_found(OSError("timed out"))
