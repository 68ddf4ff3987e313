"""Job requirements: each demo job declares what the RHOAI Ray image lacks, pinned, and
submit reads them into runtime_env pip."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kfp_ray import jobs
from kfp_ray.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "pipelines" / "jobs"


def constraints() -> dict[str, str]:
    pins = (re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line) for line in (ROOT / "constraints.txt").read_text().splitlines())
    return {m.group(1).lower(): m.group(2) for m in pins if m}


@pytest.mark.parametrize("job", sorted(p.stem for p in JOBS.glob("*.py") if p.stem != "storage"))
def test_every_job_declares_pinned_requirements_that_agree_with_the_project(job):
    lines = jobs.read_requirements(f"requirements/{job}.txt", str(JOBS), None)
    assert lines and all(re.fullmatch(r"[A-Za-z0-9_.-]+==[\w.+]+", line) for line in lines), lines
    pinned = constraints()
    for line in lines:
        name, version = line.split("==")
        # a local build label (torch 2.13.0+cpu here) is the same release
        assert pinned.get(name.lower(), version).split("+")[0] == version, f"{line} disagrees with constraints.txt"


def test_comments_and_blank_lines_are_left_out(tmp_path):
    (tmp_path / "req.txt").write_text("# what the job needs\n\nxgboost-cpu==3.2.0  # trees\n  boto3==1.44.5\n")
    assert jobs.read_requirements("req.txt", str(tmp_path), None) == ["xgboost-cpu==3.2.0", "boto3==1.44.5"]
    embedded = tmp_path / "root"
    (embedded / "code").mkdir(parents=True)
    (embedded / "code" / "r.txt").write_text("torch==2.13.0\n")
    assert jobs.read_requirements("r.txt", "code", str(embedded)) == ["torch==2.13.0"]


@pytest.mark.parametrize("req, wd", [("missing.txt", "code"), ("/etc/passwd", "code"), ("r.txt", ""),
                                     ("r.txt", "s3://bucket/code")])
def test_a_requirements_file_outside_the_embedded_code_is_refused_naming_the_field(tmp_path, req, wd):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "r.txt").write_text("torch==2.13.0\n")
    with pytest.raises(InputError) as err:
        jobs.read_requirements(req, wd, str(tmp_path))
    assert err.value.field == "requirements_file" and "Fix:" in str(err.value)


def test_a_mirror_given_on_provision_reaches_the_ray_pods_env_and_bad_ones_are_refused():
    from kfp_ray.errors import InputErrors
    from kfp_ray.tasks import pip_mirror_env

    assert pip_mirror_env("", "") == {}
    assert pip_mirror_env("http://nexus.local:8081/repository/pypi/simple", "nexus.local:8081") == {
        "PIP_INDEX_URL": "http://nexus.local:8081/repository/pypi/simple", "PIP_TRUSTED_HOST": "nexus.local:8081"}
    for index, host, field in [("nexus.local/simple", "", "pip_index_url"), ("", "nexus.local", "pip_trusted_host"),
                               ("https://m/simple", "a b", "pip_trusted_host")]:
        with pytest.raises((InputError, InputErrors)) as err:
            pip_mirror_env(index, host)
        assert field in str(err.value) and "Fix:" in str(err.value)
