"""The run report (kfp_ray/report.py) rendered in headless Chromium: its parts are there and
drawn, it needs nothing from the network, and a failed run's report says where and why. The
screenshot goes to docs/report.png (the README shows it)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from kfp_ray.report import Phase, RunReport, render

ROOT = Path(__file__).resolve().parents[2]
LABELS = ["T-shirt", "Trouser", "Pullover"]


def sample(**changes) -> RunReport:
    r = RunReport(
        run_id="3f1c0a7e-demo", title="fashion_mnist",
        phases=[Phase("queued", 0, 0.4), Phase("starting", 0.4, 11.9), Phase("job", 12.3, 58.0),
                Phase("teardown", 58.2, 60.1, "follow deleted the cluster")],
        curves={"train loss": [1.9, 1.1, 0.8, 0.62, 0.55], "val accuracy": [0.52, 0.71, 0.8, 0.84, 0.86]},
        best_step=4, labels=LABELS, matrix=[[81, 3, 6], [2, 95, 1], [9, 1, 77]],
        metrics={"accuracy": 0.8612, "loss": 0.5501, "epochs": 5},
        best_config={"lr": 0.001, "batch_size": 64},
        cluster={"name": "ray-3f1c0a7e", "queue": "local-queue-test", "head": "1 CPU, 4Gi",
                 "workers": "2 x (1 CPU, 4Gi)"},
        locations={"model": "s3://kfp-ray/runs/3f1c0a7e/model/", "checkpoints": "s3://kfp-ray/runs/3f1c0a7e/checkpoints/",
                   "log": "s3://kfp-ray/runs/3f1c0a7e/job.log"})
    for k, v in changes.items():
        setattr(r, k, v)
    return r


class Refs(HTMLParser):
    """Every URL the page would fetch, and any script."""

    def __init__(self):
        super().__init__()
        self.fetches, self.scripts = [], 0

    def handle_starttag(self, tag, attrs):
        self.scripts += tag == "script"
        for k, v in attrs:
            if k in ("src", "href", "xlink:href", "action", "data") and v:
                self.fetches.append(v)


def test_the_report_fetches_nothing_and_escapes_what_it_shows():
    page = render(sample(error="<script>alert(1)</script>", status="FAILED", failed_at="follow-ray-job"))
    refs = Refs()
    refs.feed(page)
    assert refs.fetches == [] and refs.scripts == 0  # offline: no script, image, font or stylesheet fetched
    assert "@import" not in page and "url(" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


@pytest.fixture(scope="module")
def chromium():
    """Debian's chromium, installed if missing (root and apt-get); skipped only where it cannot be."""
    path = shutil.which("chromium")
    if path is None and shutil.which("apt-get") and os.geteuid() == 0:
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, timeout=300)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], capture_output=True, timeout=900)
        path = shutil.which("chromium")
    if path is None:
        pytest.skip("Debian's chromium is not installed and cannot be here (needs root and apt-get)")
    return path


def headless(chromium, tmp_path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}", *args],
                          capture_output=True, text=True, timeout=120)


def test_chromium_renders_every_part_and_a_screenshot(chromium, tmp_path):
    page = tmp_path / "report.html"
    page.write_text(render(sample()))
    dom = headless(chromium, tmp_path, "--dump-dom", page.as_uri()).stdout
    assert 'id="status"' in dom and ">SUCCEEDED<" in dom and 'id="failure"' not in dom
    assert [m for m in re.findall(r'data-phase="(\w+)"', dom)] == ["queued", "starting", "job", "teardown"]
    assert sorted(re.findall(r'data-series="([^"]+)"', dom)) == ["train loss", "val accuracy"]
    assert 'class="best"' in dom and "best epoch 5" in dom
    assert len(re.findall(r'class="cell"', dom)) == len(LABELS) ** 2
    for section in ("metrics", "best", "cluster", "locations"):
        assert f'id="{section}"' in dom
    shot = ROOT / "docs" / "report.png"
    out = headless(chromium, tmp_path, f"--screenshot={tmp_path / 'shot.png'}", "--window-size=960,1500", page.as_uri())
    assert (tmp_path / "shot.png").exists(), out.stderr[-2000:]
    png = (tmp_path / "shot.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000  # drawn, not a blank page
    if os.environ.get("KFP_RAY_UPDATE_SCREENSHOT"):
        shot.write_bytes(png)


def test_a_failed_runs_report_says_where_and_why(chromium, tmp_path):
    page = tmp_path / "failed.html"
    page.write_text(render(sample(status="FAILED", failed_at="follow-ray-job", curves={}, matrix=[], labels=[],
                                  best_config={}, error="job raised ModuleNotFoundError: No module named 'xgboost'",
                                  log_tail="Traceback ...\nModuleNotFoundError: No module named 'xgboost'",
                                  phases=[Phase("queued", 0, 1), Phase("starting", 1, 9), Phase("job", 9, 12)])))
    dom = headless(chromium, tmp_path, "--dump-dom", page.as_uri()).stdout
    assert ">FAILED<" in dom and "Failed at follow-ray-job" in dom and "No module named 'xgboost'" in dom
    assert 'id="log"' in dom and 'id="curves"' not in dom


def test_results_json_becomes_the_report_with_its_curves_and_best_trial():
    from kfp_ray.results import run_report

    results = {"framework": "xgboost", "model_uri": "s3://b/r/model/model.json", "trials_uri": "s3://b/r/trials.csv",
               "metrics": {"accuracy": 0.95, "trials": 3}, "best_config": {"eta": 0.1, "max_depth": 4},
               "confusion_matrix": {"labels": ["malignant", "benign"], "matrix": [[40, 3], [2, 69]]},
               "history": {"steps": "trial", "series": {"val logloss": [0.2, 0.09, 0.12]}, "best": 1}}
    r = run_report(results, "r1", title="xgboost_tune", locations={"results": "s3://b/r/results.json"}, log_tail="ignored")
    page = render(r)
    assert "best trial 2" in page and 'data-series="val logloss"' in page and page.count('class="cell"') == 4
    assert "s3://b/r/trials.csv" in page and "s3://b/r/results.json" in page and "ignored" not in page
    bare = render(run_report(None, "r2", printed={"loss": 0.125}, log_tail="epoch 1 done"))
    assert "epoch 1 done" in bare and "0.125" in bare and 'id="curves"' not in bare
