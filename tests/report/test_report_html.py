"""The run report (kfp_ray/report.py) as a reader gets it: its parts are there and drawn in
headless Chromium, it fetches nothing, a failed run says where and why, a terminated one says
so (not "failed"), the timeline is at the tasks' real times, and axe-core finds no
accessibility violation (WCAG 2 A/AA and best practices) in it. The screenshot goes to
docs/report.png (the README shows it) with KFP_RAY_UPDATE_SCREENSHOT=1.

Chromium (Debian's package) and axe-core (npm, in .axe/) come from tools/install-browser-check,
which `make test` runs. Missing, the browser tests skip with the reason, except under CI=true,
where they fail: a check that cannot run must not pass."""

from __future__ import annotations

import html as htmllib
import json
import os
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path

import pytest

from kfp_ray import report
from kfp_ray.postmortem import TaskPod, timeline
from kfp_ray.report import Phase, RunReport, render

ROOT = Path(__file__).resolve().parents[2]
AXE = ROOT / ".axe" / "node_modules" / "axe-core" / "axe.min.js"
LABELS = ["T-shirt", "Trouser", "Pullover"]
T0 = datetime(2026, 3, 2, 9, 30, 0, tzinfo=UTC)


def sample(**changes) -> RunReport:
    r = RunReport(
        run_id="3f1c0a7e-demo", title="fashion_mnist", run_url="https://ds-pipeline-ui-dspa.apps.example.com/#/runs/details/3f1c0a7e-demo",
        run={"pipeline": "fashion_mnist", "lifecycle": "raycluster", "dataset": "fashion_mnist",
             "image": "quay.io/modh/ray:2.52.1-py311-cu121", "Ray version": "2.52.1"},
        phases=[Phase("stage-dataset", 0, 4.2, state="succeeded"), Phase("provision-ray-cluster", 0.3, 13.1, state="succeeded"),
                Phase("submit-ray-job", 21.5, 23.0, state="succeeded"), Phase("follow-ray-job", 30.4, 92.0, state="succeeded"),
                Phase("publish-training-results", 104.0, 110.5, state="running")],
        started_at=T0, durations={"queued": 0.4, "starting": 11.5, "job": 58.0, "teardown": 1.9},
        curves={"train loss": [1.9, 1.1, 0.8, 0.62, 0.55], "val accuracy": [0.52, 0.71, 0.8, 0.84, 0.86]},
        best_step=4, labels=LABELS, matrix=[[81, 3, 6], [2, 95, 1], [9, 1, 77]],
        metrics={"accuracy": 0.8612, "loss": 0.5501, "epochs": 5},
        best_config={"lr": 0.001, "batch_size": 64},
        cluster={"name": "ray-3f1c0a7e", "shape": "LocalQueue local-queue-test; head 1 CPU, 4Gi; 2 workers x (1 CPU, 4Gi)"},
        locations={"model": "s3://kfp-ray/runs/3f1c0a7e/model/model.pt", "results": "s3://kfp-ray/runs/3f1c0a7e/results.json",
                   "job log": "s3://mlpipeline/v2/artifacts/fashion-mnist/3f1c0a7e/follow-ray-job/job_log"},
        links={"model": "https://s3.console.aws.amazon.com/s3/object/kfp-ray?prefix=runs/3f1c0a7e/model/model.pt"})
    for k, v in changes.items():
        setattr(r, k, v)
    return r


class Refs(HTMLParser):
    """Every URL the page would fetch (a resource), every link a reader may follow, any script."""

    def __init__(self):
        super().__init__()
        self.fetches, self.links, self.scripts = [], [], 0

    def handle_starttag(self, tag, attrs):
        self.scripts += tag == "script"
        for k, v in attrs:
            if tag == "a" and k == "href":
                self.links.append(v)
            elif k in ("src", "href", "xlink:href", "action", "data", "srcset", "poster") and v:
                self.fetches.append(v)


def test_the_report_fetches_nothing_and_escapes_what_it_shows():
    page = render(sample(error="<script>alert(1)</script>", status="FAILED", failed_at="follow-ray-job",
                         links={"model": "javascript:alert(1)"}, run_url="http://plain.example/run"))
    refs = Refs()
    refs.feed(page)
    assert refs.fetches == [] and refs.scripts == 0  # offline: no script, image, font or stylesheet fetched
    assert "@import" not in page and "url(" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert refs.links == []  # only https:// becomes a link
    refs = Refs()
    refs.feed(render(sample()))
    assert refs.links == [sample().run_url, sample().links["model"]]


def test_a_terminated_run_says_so_with_a_visible_badge():
    """It was "ENDED": a white-on-white badge (no CSS for it) and "Failed at an unknown task"."""
    for status in ("ENDED", "TERMINATED", "CANCELED"):
        page = render(sample(status=status, error="Stopped: follow-ray-job."))
        assert '<span class="status TERMINATED" id="status">TERMINATED</span>' in page
        assert "Failed at" not in page and 'id="failure"' not in page
        assert 'id="ended"' in page and "terminated (cancelled) before it finished" in page
        assert "Stopped: follow-ray-job." in page
    unknown = render(sample(status="", error="No finished task pod of run x was found"))
    assert ">UNKNOWN<" in unknown and "Failed at" not in unknown and "is not known here" in unknown
    for state, background in report.BADGES.items():  # each badge drawn: a background of its own, legible
        assert f".{state}{{background:{background}}}" in report.CSS
        assert report.contrast(background, "#ffffff") >= 4.5, state


def test_every_colour_pair_reads_at_4_5_to_1():
    """Text on the page and on its panels, the badges, the chart marks and labels, the
    heatmap's numbers on every shade."""
    panels = ["#ffffff", "#f3f3f3", "#fdecea", "#fbf1e3"]  # page, table head/pre/note, failure, terminated
    for ink in [report.INK, report.MUTED, "#1a55a8", report.BEST, *report.SERIES]:
        for panel in panels:
            assert report.contrast(ink, panel) >= 4.5, (ink, panel)
    for name, bar in report.BARS.items():
        assert report.contrast(bar, "#ffffff") >= 4.5, name
    for i in range(101):
        fill, ink = report.heat(i / 100)
        assert report.contrast(fill, ink) >= 4.5, (i, fill, ink)
    page = render(sample())
    used = set(re.findall(r'(?:fill|stroke|color|background)[=:]"?(#[0-9a-fA-F]{6})', page))
    known = {report.INK, report.MUTED, report.PAGE, report.BEST, "#1a55a8", "#d0d0d0", "#f3f3f3", "#fdecea", "#fbf1e3",
             "#000000", *report.SERIES, *report.BARS.values(), *report.BADGES.values()}
    assert used <= known, used - known  # no colour the checks above do not cover


def test_the_timeline_is_at_the_tasks_real_times_with_the_gaps_between_them():
    """Task pods at their real start and end: bars where they ran, the idle time between them
    kept (it was durations laid end to end), and the same data as a table."""
    def pod(task, start, end, phase="Succeeded", exit_code=0, why=""):
        return TaskPod(task, phase, T0 + timedelta(seconds=start), T0 + timedelta(seconds=end) if end else None,
                       exit_code, why=why)

    pods = [pod("stage-dataset", 0, 4), pod("provision-ray-cluster", 1, 14), pod("submit-ray-job", 22, 23),
            pod("follow-ray-job", 30, 90, "Failed", 1, "kfp_ray.errors.Cancelled: the task was cancelled (SIGTERM)"),
            pod("teardown-ray-cluster", 100, None, "Running", None)]
    rows = timeline(pods, now=T0 + timedelta(seconds=105))
    assert [(p.name, p.start, p.end, p.state) for p in rows] == [
        ("stage-dataset", 0, 4, "succeeded"), ("provision-ray-cluster", 1, 14, "succeeded"),
        ("submit-ray-job", 22, 23, "succeeded"), ("follow-ray-job", 30, 90, "terminated"),
        ("teardown-ray-cluster", 100, 105, "running")]
    page = render(sample(phases=rows, started_at=T0))
    bars = re.findall(r'data-phase="([^"]+)" data-start="([\d.]+)" data-end="([\d.]+)"', page)
    assert bars[2] == ("submit-ray-job", "22.0", "23.0") and bars[3] == ("follow-ray-job", "30.0", "90.0")
    table = re.search(r'<table id="timeline-data">.*?</table>', page).group(0)
    assert "09:30:22 UTC (+22.0 s)" in table and "09:30:23 UTC (+23.0 s)" in table
    assert re.search(r"submit-ray-job</th>.*?<td>8\.0 s</td>", table)  # idle after provision ended (14 s → 22 s)
    assert "seconds since 09:30:00 UTC" in page


def test_without_real_times_the_phases_are_lengths_not_a_timeline():
    page = render(sample(phases=[], started_at=None, timeline_note="No timeline: no task pod of run r was found."))
    assert 'id="timeline"' not in page and 'class="durations"' in page and "No timeline: no task pod" in page
    assert re.search(r"<th scope=\"row\">job</th><td>58\.0 s</td>", page)


def test_the_exit_handlers_report_tells_terminated_from_failed(monkeypatch):
    from kfp_ray import postmortem, tasks

    def pod(task, phase, exit_code, why="", tail=""):
        return TaskPod(task, phase, T0, T0 + timedelta(seconds=5), exit_code, log_tail=tail, why=why)

    cancelled = pod("follow-ray-job", "Failed", 1, "kfp_ray.errors.Cancelled: the task was cancelled (SIGTERM)")
    sigterm = pod("submit-ray-job", "Failed", 143)
    failing = pod("provision-ray-cluster", "Failed", 1, "kfp_ray.errors.AdmissionTimeout: not admitted", "...")
    ok = pod("stage-dataset", "Succeeded", 0)
    cases = [([ok, cancelled, sigterm], "TERMINATED"), ([ok, failing, cancelled], "FAILED"), ([ok], "SUCCEEDED"),
             ([], "UNKNOWN")]
    for pods, state in cases:
        monkeypatch.setattr(postmortem, "task_pods", lambda run_id, ns, pods=pods: pods)
        page = tasks.report_run("r1", namespace="ns")
        assert f'id="status">{state}<' in page, state
        assert ("Failed at provision-ray-cluster" in page) == (state == "FAILED")
    monkeypatch.setattr(postmortem, "task_pods", lambda run_id, ns: [ok, cancelled, sigterm])
    assert "Stopped: follow-ray-job, submit-ray-job." in tasks.report_run("r1", namespace="ns")


def test_publishs_page_has_the_job_log_parameters_image_ray_version_and_links(monkeypatch):
    from kfp_ray import postmortem, results, runinfo

    monkeypatch.setattr(postmortem, "task_pods", lambda run_id, ns: [
        TaskPod("stage-dataset", "Succeeded", T0, T0 + timedelta(seconds=3), 0),
        TaskPod("follow-ray-job", "Succeeded", T0 + timedelta(seconds=20), T0 + timedelta(seconds=80), 0)])
    monkeypatch.setattr(runinfo, "kfp_run_url", lambda run_id, ns: "")  # no Route here: ui_url is tested below
    monkeypatch.setenv("AWS_S3_ENDPOINT", "https://s3.eu-west-1.amazonaws.com")
    monkeypatch.setenv("AWS_S3_BUCKET", "b")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "sekrit-value-123")
    data = {"model_uri": "s3://b/r/model/model.json", "metrics": {"accuracy": 0.9}}
    page = results.run_page(data, "r1", title="xgboost_tune", output_uri="s3://b/r", namespace="ns",
                            durations={"queued": 2.0, "starting": 9.0, "job": 55.0, "teardown": 0.0},
                            cluster={"name": "ray-r1"}, job_log_uri="s3://mlpipeline/v2/artifacts/r1/job_log",
                            run={"pipeline": "xgboost_tune", "lifecycle": "raycluster", "dataset": "",
                                 "entrypoint": "python train.py --key sekrit-value-123",
                                 "image": "quay.io/modh/ray:2.52.1-py311-cu121"},
                            parameters='{"num_workers": "2", "head": "1 CPU, 4Gi", "s3_prefix": ""}')
    run = re.search(r'<section id="run".*?</section>', page).group(0)
    assert "quay.io/modh/ray:2.52.1-py311-cu121" in run and "2.52.1 (from the image tag)" in run
    assert "raycluster" in run and "dataset" not in run and "s3_prefix" not in run  # empty ones are left out
    assert '<th scope="row">num_workers</th><td>2</td>' in run and "1 CPU, 4Gi" in run
    assert "sekrit" not in page and "[REDACTED]" in run
    where = re.search(r'<section id="locations".*?</section>', page).group(0)
    assert "s3://mlpipeline/v2/artifacts/r1/job_log" in where and "s3://b/r/results.json" in where
    assert where.count("open in the S3 console") == 2  # model and results (bucket b); the job log is elsewhere
    assert "https://s3.console.aws.amazon.com/s3/object/b?prefix=r/model/model.json" in where
    assert 'data-phase="follow-ray-job" data-start="20.0" data-end="80.0"' in page
    assert re.search(r"<th scope=\"row\">queued</th><td>2\.0 s</td>", page) and ">teardown<" not in page
    assert runinfo.ray_version({"ray_version": "2.47.0"}, "quay.io/modh/ray:2.52.1-py311-cu121") == "2.47.0"
    assert runinfo.ray_version(None, "registry.example.com/my/trainer:1.0") == ""
    minio = results.run_page(None, "r2", title="t", output_uri="s3://b/r2", durations={}, cluster={}, run={},
                             namespace="ns")
    monkeypatch.setenv("AWS_S3_ENDPOINT", "http://minio.minio.svc:9000")
    assert "S3 console" not in results.run_page(data, "r1", title="t", output_uri="s3://b/r", durations={}, cluster={},
                                                run={}, namespace="ns")
    assert "s3://b/r2/" in minio
    odd = results.run_page(None, "r3", title="t", output_uri="s3://b/r3", durations={}, cluster={}, run={},
                           parameters="not json {", namespace="ns")
    assert '<th scope="row">parameters</th><td>not json {</td>' in odd
    # the follow task's copies of the job log and the run's events, where they are in S3
    for there in ({"job.log", "events.jsonl"}, {"job.log"}):
        monkeypatch.setattr(results, "stored", lambda uri, there=there: uri.rsplit("/", 1)[-1] in there)
        where = re.search(r'<section id="locations".*?</section>',
                          results.run_page(None, "r4", title="t", output_uri="s3://b/r4", durations={}, cluster={},
                                           run={}, namespace="ns")).group(0)
        assert "job log in S3</th><td><code>s3://b/r4/logs/job.log</code>" in where
        assert ("run events in S3</th><td><code>s3://b/r4/logs/events.jsonl</code>" in where) == ("events.jsonl" in there)


def test_a_preempted_runs_page_shows_its_preemptions_what_they_cost_and_where_it_resumed(monkeypatch):
    from kfp_ray import postmortem, results, runinfo

    monkeypatch.setattr(postmortem, "task_pods", lambda run_id, ns: [
        TaskPod("follow-ray-job", "Succeeded", T0 + timedelta(seconds=20), T0 + timedelta(seconds=150), 0)])
    monkeypatch.setattr(runinfo, "kfp_run_url", lambda run_id, ns: "")
    data = {"model_uri": "s3://b/r/model/model.pt", "metrics": {"accuracy": 0.8},
            "resumed_from": {"uri": "s3://b/r/checkpoints/epoch-0002.pt", "epoch": 2}}
    at, back = (T0 + timedelta(seconds=60)).isoformat(), (T0 + timedelta(seconds=85.5)).isoformat()
    page = results.run_page(data, "r1", title="fashion_mnist", output_uri="s3://b/r", namespace="ns",
                            durations={"job": 80.0, "lost to preemption": 31.5}, cluster={},
                            run={"pipeline": "fashion_mnist", "preemptions": 1}, preempted=[[at, back]])
    # the timeline: the preemption between the task's start and end, from when it was seen to when the job ran again
    assert 'data-phase="preempted (1)" data-start="40.0" data-end="65.5"' in page
    run = re.search(r'<section id="run".*?</section>', page).group(0)
    assert '<th scope="row">preemptions</th><td>1</td>' in run
    assert '<th scope="row">resumed from</th><td>s3://b/r/checkpoints/epoch-0002.pt (after epoch 3)</td>' in run
    assert re.search(r'<th scope="row">lost to preemption</th><td>31\.5 s</td>', page)


def test_the_kfp_run_link_is_the_dspa_ui_routes_and_s3_console_links_are_aws_only():
    routes = [{"metadata": {"name": "ds-pipeline-dspa"}, "spec": {"host": "api.apps.example.com"}},
              {"metadata": {"name": "ds-pipeline-ui-dspa"}, "spec": {"host": "ui.apps.example.com"}}]
    from kfp_ray.runinfo import ui_url

    assert ui_url(routes, "r1") == "https://ui.apps.example.com/#/runs/details/r1"
    assert ui_url(routes[:1], "r1") == ""
    url = report.s3_console_url
    assert url("s3://b/runs/r1/", "") == "https://s3.console.aws.amazon.com/s3/buckets/b?prefix=runs/r1/"
    assert url("s3://b/a b.json", "s3.amazonaws.com") == "https://s3.console.aws.amazon.com/s3/object/b?prefix=a%20b.json"
    assert url("s3://b/x", "https://minio.example.com:9000") == "" and url("/tmp/x", "") == ""
    assert url("s3://b/x", "https://amazonaws.com.evil.example") == ""


# --- in a browser -----------------------------------------------------------------------------
def _missing(reason: str):
    if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
        pytest.fail(f"{reason}: CI must run this check (make test runs tools/install-browser-check)")
    pytest.skip(f"{reason}: run tools/install-browser-check (root: apt-get chromium, npm axe-core into .axe/)")


@pytest.fixture(scope="module")
def chromium():
    path = shutil.which("chromium")
    if path is None:
        _missing("Debian's chromium is not installed")
    return path


@pytest.fixture(scope="module")
def axe(chromium):
    if not AXE.is_file():
        _missing(f"axe-core is not installed at {AXE.relative_to(ROOT)}")
    return AXE


def headless(chromium, tmp_path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--no-first-run", "--allow-file-access-from-files", f"--user-data-dir={tmp_path / 'profile'}",
                           *args], capture_output=True, text=True, timeout=120)


# Each SVG text's computed fill and the fill of the rect under its centre (else the white
# page): axe leaves SVG text's contrast "incomplete", so the test computes it.
SVG_TEXT = """[...document.querySelectorAll('svg text')].map(t => {
  const b = t.getBoundingClientRect();
  const under = document.elementsFromPoint(b.x + b.width / 2, b.y + b.height / 2).find(e => e.tagName === 'rect');
  return {text: t.textContent, fill: getComputedStyle(t).fill,
          background: under ? getComputedStyle(under).fill : 'rgb(255, 255, 255)'};
})"""


def in_browser(chromium, axe, tmp_path, page: str, name: str) -> dict:
    """axe-core's violations on the page, and its SVG texts' colours: axe.min.js and a runner put
    in after the page's own content; the runner writes what it found into the DOM, which
    Chromium dumps once the virtual time budget lets axe.run's promise settle."""
    runner = (f"const svgText = {SVG_TEXT};"
              "axe.run(document).then(r => r.violations, e => [{id: 'axe-error', help: String(e), nodes: []}])"
              ".then(v => { const out = document.createElement('pre'); out.id = 'axe-results';"
              " out.textContent = JSON.stringify({violations: v, svgText}); document.body.appendChild(out); });")
    file = tmp_path / f"{name}.html"
    file.write_text(page.replace("</body>", f'<script src="{axe.as_uri()}"></script><script>{runner}</script></body>'))
    dom = headless(chromium, tmp_path, "--window-size=1000,5000", "--virtual-time-budget=30000", "--dump-dom",
                   file.as_uri())
    found = re.search(r'<pre id="axe-results">(.*?)</pre>', dom.stdout, re.S)
    assert found, f"axe did not report on {name}: {dom.stderr[-2000:]}"
    return json.loads(htmllib.unescape(found.group(1)))


def rgb(css: str) -> str:
    return "#" + "".join(f"{int(c):02x}" for c in re.findall(r"\d+", css)[:3])


def summary(violations: list[dict]) -> str:
    return "\n".join(f"{v['id']} ({v.get('impact')}): {v['help']}: " + "; ".join(n["html"][:120] for n in v["nodes"][:3])
                     for v in violations)


def test_axe_finds_no_violation_in_any_kind_of_report(chromium, axe, tmp_path):
    pages = {"succeeded": sample(),
             "failed": sample(status="FAILED", failed_at="follow-ray-job", curves={}, matrix=[], labels=[],
                              error="job raised ModuleNotFoundError: No module named 'xgboost'",
                              log_tail="Traceback ...\nModuleNotFoundError: No module named 'xgboost'\n" * 30),
             "terminated, without real times": sample(status="ENDED", error="Stopped: follow-ray-job.", phases=[], run={},
                                                      timeline_note="No timeline: the task pods could not be read.")}
    for name, r in pages.items():
        found = in_browser(chromium, axe, tmp_path, render(r), re.sub(r"\W+", "-", name))
        assert found["violations"] == [], f"{name}:\n{summary(found['violations'])}"
        assert found["svgText"]
        for t in found["svgText"]:  # as drawn: the CSS may not override a text's own fill
            ratio = report.contrast(rgb(t["fill"]), rgb(t["background"]))
            assert ratio >= 4.5, f"{name}: SVG text {t['text']!r} {t['fill']} on {t['background']}: {ratio:.2f}:1"


def test_the_axe_check_can_fail(chromium, axe, tmp_path):
    """The same harness on faults like the old report's (no lang, the success badge's old
    colour, 3.4:1) finds them. (axe leaves text the colour of its background, the old ENDED
    badge, as "incomplete": test_a_terminated_run_says_so_with_a_visible_badge covers that.)"""
    page = render(sample()).replace(' lang="en"', "").replace(
        'class="status SUCCEEDED"', 'class="status" style="background:#2e9d5b"')
    ids = {v["id"] for v in in_browser(chromium, axe, tmp_path, page, "broken")["violations"]}
    assert {"html-has-lang", "color-contrast"} <= ids, ids


def test_chromium_renders_every_part_and_a_screenshot(chromium, tmp_path):
    page = tmp_path / "report.html"
    page.write_text(render(sample()))
    dom = headless(chromium, tmp_path, "--dump-dom", page.as_uri()).stdout
    assert '<html lang="en">' in dom and 'id="status"' in dom and ">SUCCEEDED<" in dom and 'id="failure"' not in dom
    assert re.findall(r'class="phase" data-phase="([^"]+)"', dom) == [
        "stage-dataset", "provision-ray-cluster", "submit-ray-job", "follow-ray-job", "publish-training-results"]
    assert sorted(re.findall(r'data-series="([^"]+)"', dom)) == ["train loss", "val accuracy"]
    assert 'class="best"' in dom and "best epoch 5" in dom
    assert len(re.findall(r'class="cell"', dom)) == len(LABELS) ** 2
    for section in ("run", "timeline", "timeline-data", "durations", "curves-data", "metrics", "confusion-data", "best",
                    "cluster", "locations"):
        assert f'id="{section}"' in dom, section
    shot = ROOT / "docs" / "report.png"
    out = headless(chromium, tmp_path, f"--screenshot={tmp_path / 'shot.png'}", "--window-size=980,2420", page.as_uri())
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
                                  phases=[Phase("provision-ray-cluster", 0, 9, state="succeeded"),
                                          Phase("follow-ray-job", 12, 20, state="failed")])))
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
    assert "<th scope=\"row\">2 (best)</th><td>0.09</td>" in page  # the curves' data table
    bare = render(run_report(None, "r2", printed={"loss": 0.125}, log_tail="epoch 1 done"))
    assert "epoch 1 done" in bare and "0.125" in bare and 'id="curves"' not in bare
