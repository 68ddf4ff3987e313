"""`kfp-ray`: listing, and clear errors before anything runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kfp_ray.pipelines.cli_args import UsageError, cron_fields, parse_params

ROOT = Path(__file__).resolve().parents[2]


def cli(*args):
    return subprocess.run([sys.executable, "-m", "kfp_ray.pipelines", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_list_names_every_pipeline():
    from kfp_ray.pipelines import registry

    out = cli("list").stdout
    assert all(name in out for name in ("ray_training", "fashion_mnist", "xgboost_tune"))
    # from compiled/, as the built pipeline says it
    built = registry.load("kfp_ray_gc").pipeline_spec.pipeline_info.description
    assert registry.description("kfp_ray_gc") == built and built.split("\n")[0] in out


def test_unknown_pipeline_and_bad_parameters_fail_clearly():
    r = cli("run", "mnist", "--local")
    assert r.returncode == 2 and "unknown pipeline 'mnist'; known: ray_training, fashion_mnist, xgboost_tune" in r.stderr
    r = cli("run", "xgboost_tune", "--local", "--param", "samples")
    assert r.returncode == 2 and "write it as key=value" in r.stderr
    r = cli("run", "xgboost_tune", "--local", "--param", "sample=3")
    assert r.returncode == 2 and "has no such parameter" in r.stderr and "samples" in r.stderr


def test_parameters_are_typed_by_the_pipeline():
    assert parse_params("xgboost_tune", ["samples=4", "head_memory=3Gi"]) == {"samples": 4, "head_memory": "3Gi"}
    assert parse_params("fashion_mnist", ["use_gpu=true"]) == {"use_gpu": True}
    assert parse_params("ray_training", ["entrypoint=python t.py", 'requirements=["xgboost"]'])["requirements"] == ["xgboost"]
    with pytest.raises(UsageError, match="expected int"):
        parse_params("xgboost_tune", ["samples=many"])
    with pytest.raises(UsageError, match="needs --param for: entrypoint"):
        parse_params("ray_training", [])


def test_recurring_runs_need_six_cron_fields():
    assert cron_fields("0 0 2 * * *") == "0 0 2 * * *"
    with pytest.raises(UsageError, match="KFP needs 6, seconds first"):
        cron_fields("0 2 * * *")
